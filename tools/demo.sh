#!/usr/bin/env bash
# `make demo`: refgrad checking torch's engines on a transformer block (tools/demo_torch.py), then a
# short tour of the refgrad command on examples/programs/ and of the C++ eager tape.
set -euo pipefail
cd "$(dirname "$0")/.."
refgrad=build/refgrad

show() {
  printf '\n\033[1m$ %s\033[0m\n' "$*"
  "$@"
}

echo "refgrad runs PyTorch backward programs written out as flat lists of pure calls."
show .venv/bin/python tools/demo_torch.py
echo
echo "The same programs without Python: the refgrad command on examples/programs/."
echo "A diamond: a = x.exp(); loss = (a.sin() + a.cos()).sum(). Two gradients meet in \`add\`:"
show $refgrad dis examples/programs/diamond.bwd
echo
echo "Run it, in the program's float32 and in float64 (the oracle's reference precision):"
show $refgrad run examples/programs/diamond.bwd --precision both
echo
echo "A two-layer MLP's backward; its comments give torch's gradients to compare with:"
show $refgrad run examples/programs/mlp.bwd
echo
echo "Step through it: stop at the first AddmmBackward0, look at its incoming grad, step, look at the results:"
printf '%s\n' "break AddmmBackward0" continue "print %2" step regs quit |
  (printf '\n\033[1m$ refgrad step examples/programs/mlp.bwd  <<< "break AddmmBackward0; continue; ..."\033[0m\n';
   $refgrad step examples/programs/mlp.bwd)
echo
echo "Programs also come from C++ models on refgrad's eager tape (examples/eager/*.cpp; --print-program shows one):"
show build/examples/eager/mlp_train
show build/examples/eager/cnn
show build/examples/eager/transformer_block
echo
echo "More: build/refgrad --help, docs/cli.md, docs/program.md, examples/programs/*.bwd;"
echo "      the teaching notebooks in notebooks/ (make notebooks starts JupyterLab on them)."
