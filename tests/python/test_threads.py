"""Issue 21, Deliver 2: the oracle's results are the same bits for any thread count.

Every kernel cuts its work by the sizes alone and combines partial results in a fixed order
(src/tensor/parallel.hpp), so running a captured program on 1, 2 or 5 threads must give byte-identical
grads, as captured and promoted to float64; checked on the zoo and the mid-size CNN, whose convolutions,
batch norms and poolings are big enough to be split. The thread count is set on the Machine
(threads=), for the process (refgrad.set_num_threads) and on the command line (--threads).
"""
import os
import subprocess

import numpy as np
import pytest
import torch

import refgrad
import refgrad.torch as rt
from refgrad.zoo import MID_SIZE, ZOO

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.path.join(REPO, "build", "refgrad")
MODELS = {**ZOO, "cnn_mid": MID_SIZE["cnn_mid"]}


def captured(name: str):
    model, forward = MODELS[name](torch.float32)
    # names the program text can spell ("0.weight" cannot: it starts with a digit)
    names = {"p_" + key.replace(".", "_"): parameter for key, parameter in model.named_parameters()}
    return rt.capture(forward(model), names=names)


def same_bytes(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("precision", ["as_captured", "float64"])
@pytest.mark.parametrize("name", list(MODELS))
def test_the_same_bits_at_any_thread_count(name, precision):
    capture = captured(name)
    bundle = capture.bundle if precision == "as_captured" else refgrad.promote_to_float64(capture.bundle)
    one = refgrad.run_program(bundle, threads=1)
    assert one, "the program has results"
    for threads in (2, 5):
        many = refgrad.run_program(bundle, threads=threads)
        assert many.keys() == one.keys()
        different = [key for key in one if not same_bytes(many[key], one[key])]
        assert not different, f"{name} ({precision}) at {threads} threads: other bits than at 1 thread in {different}"
    # and the machine the debugger steps gives them too
    machine = refgrad.Machine(bundle, threads=3)
    machine.run()
    assert all(same_bytes(machine.leaf_grad(key[1:]), one[key]) for key in one if key.startswith("@"))


def test_thread_count_setting():
    before = refgrad.num_threads()
    assert refgrad.default_num_threads() >= 1
    try:
        refgrad.set_num_threads(3)
        assert refgrad.num_threads() == 3
        refgrad.set_num_threads(0)
        assert refgrad.num_threads() == refgrad.default_num_threads()
        with pytest.raises(refgrad.Error, match="the thread count must be 0 \\(every core\\) or more, got -2"):
            refgrad.set_num_threads(-2)
        with pytest.raises(refgrad.Error, match="got -1"):
            refgrad.Machine(captured("mlp").bundle, threads=-1).run()
    finally:
        refgrad.set_num_threads(before if before != refgrad.default_num_threads() else 0)


def test_cli_threads(tmp_path):
    path = str(tmp_path / "cnn.safetensors")
    captured("cnn").save(path)
    outputs = []
    for threads in ("1", "3"):
        out = str(tmp_path / f"grads{threads}.safetensors")
        result = subprocess.run([CLI, "run", path, "--threads", threads, "-o", out], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        with open(out, "rb") as file:
            outputs.append(refgrad.read_safetensors(file.read(), out)[0])
    assert outputs[0].keys() == outputs[1].keys() and outputs[0]
    assert all(same_bytes(outputs[0][key], outputs[1][key]) for key in outputs[0])
    refused = subprocess.run([CLI, "run", path, "--threads", "-3"], capture_output=True, text=True)
    assert refused.returncode == 2 and "--threads" in refused.stderr
