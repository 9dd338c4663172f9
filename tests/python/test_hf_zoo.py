"""A zoo of Hugging Face transformers architectures, built from small configs with random weights (never a
download), through refgrad.check against eager; and grouped-query attention.

Unfinished: so far the decoders (GPT-2, Llama and Qwen2 and Mistral with fewer key/value heads than query
heads, so that enable_gqa=True reaches ScaledDotProductFlashAttentionForCpuBackward0), BERT, T5 and ViT.
"""
import pytest
import torch
import torch.nn.functional as F
import transformers

import refgrad.check as refgrad_check
import refgrad.torch as rt

VOCAB = 64


def token_ids():
    return torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(0))


def decoder(model_class, config):
    torch.manual_seed(0)
    model = model_class(config)
    model.train()  # dropout is off through the config
    ids = token_ids()
    return model, lambda m: m(input_ids=ids, labels=ids).loss


SMALL_LLAMA_LIKE = dict(num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, hidden_size=32,
                        intermediate_size=64, vocab_size=VOCAB, max_position_embeddings=16, attention_dropout=0.0)

MODELS = {
    "gpt2": lambda: decoder(transformers.GPT2LMHeadModel, transformers.GPT2Config(
        n_layer=1, n_head=2, n_embd=16, vocab_size=VOCAB, n_positions=16, attn_pdrop=0.0, resid_pdrop=0.0,
        embd_pdrop=0.0, bos_token_id=0, eos_token_id=0)),
    "llama": lambda: decoder(transformers.LlamaForCausalLM, transformers.LlamaConfig(**SMALL_LLAMA_LIKE)),
    "qwen2": lambda: decoder(transformers.Qwen2ForCausalLM, transformers.Qwen2Config(**SMALL_LLAMA_LIKE)),
    "mistral": lambda: decoder(transformers.MistralForCausalLM, transformers.MistralConfig(**SMALL_LLAMA_LIKE)),
}


SMALL_ENCODER = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
CLASS_LABELS = torch.tensor([0, 1])


def built(model):
    torch.manual_seed(0)
    return model().train()


MODELS["bert"] = lambda: (
    built(lambda: transformers.BertForSequenceClassification(
        transformers.BertConfig(vocab_size=VOCAB, max_position_embeddings=16, **SMALL_ENCODER))),
    lambda m, ids=token_ids(): m(input_ids=ids, labels=CLASS_LABELS).loss)
MODELS["vit"] = lambda: (
    built(lambda: transformers.ViTForImageClassification(
        transformers.ViTConfig(image_size=16, patch_size=8, num_labels=2, **SMALL_ENCODER))),
    lambda m, pixels=torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0)):
        m(pixel_values=pixels, labels=CLASS_LABELS).loss)
MODELS["t5"] = lambda: (
    built(lambda: transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=VOCAB, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2, dropout_rate=0.0,
        decoder_start_token_id=0))),
    lambda m, ids=token_ids(): m(input_ids=ids, labels=ids).loss)


def assert_passes(report):
    failures = [(engine, name) for engine, grads in report.results.items()
                for name, result in grads.items() if not result.passed]
    assert report.passed and not failures, report.format(eager=True)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_hf_model_agrees_with_eager(name, tmp_path):
    model, forward = MODELS[name]()
    assert rt.coverage(forward(model)) == []
    assert_passes(refgrad_check.check(forward, model, engines=("eager",), reproducer_dir=str(tmp_path)))


class GroupedQueryAttention(torch.nn.Module):
    def __init__(self, dim=16, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = torch.nn.Linear(dim, dim)
        self.kv = torch.nn.Linear(dim, 2 * kv_heads * self.head_dim)

    def forward(self, x):
        b, n, _ = x.shape
        q = self.q(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(b, n, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).sum()


def test_a_gqa_attention_module_agrees_with_eager(tmp_path):
    torch.manual_seed(0)
    module, x = GroupedQueryAttention(), torch.randn(2, 6, 16)
    nodes = {node.name for node in rt.capture(module(x)).graph.nodes}
    assert "ScaledDotProductFlashAttentionForCpuBackward0" in nodes
    assert_passes(refgrad_check.check(module, x, engines=("eager",), reproducer_dir=str(tmp_path)))
