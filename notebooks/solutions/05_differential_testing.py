# Solutions to notebooks/05_differential_testing.ipynb.
# Each block replaces the exercise cell tagged exercise-<id> (tests/notebooks/test_notebooks.py puts them in).

# %% exercise-1
# fc2's gradients are computed before the ReLU's backward runs, so only fc1's are off
failed_gradients = {"fc1.weight", "fc1.bias"}
blamed_node = "ReluBackward0"

# %% exercise-2
class ScalesTanh:
    name = "scales_tanh"

    def gradients(self, forward, grad_outputs):
        run = forward()
        node = find_node(run.outputs, "TanhBackward0")

        def scale(grad_inputs, grad_outputs):
            return tuple(None if g is None else g * 1.01 for g in grad_inputs)

        node.register_hook(scale)
        torch.autograd.backward(run.outputs, grad_outputs)
        return {name: leaf.grad for name, leaf in run.leaves.items()}

# %% exercise-3
def failing_gradients(path):
    bundle = refgrad.load(path)
    reference = refgrad.Machine(refgrad.promote_to_float64(bundle))
    reference.run()
    as_written = refgrad.Machine(bundle)
    as_written.run()
    eager, engine = bundle.results[0], bundle.results[1]
    rtol = 1.3e-6
    failing = set()
    for key, value in engine.tensors.items():
        if not key.startswith("@"):  # the engine's values of registers at the divergence (%12): not gradients
            continue
        name = key.lstrip("@")
        R = np.asarray(reference.leaf_grad(name))
        noise = np.abs(np.asarray(as_written.leaf_grad(name)).astype(np.float64) - R).max()
        eager_error = np.abs(np.asarray(eager.tensors[key]).astype(np.float64) - R).max()
        error = np.abs(np.asarray(value).astype(np.float64) - R).max()
        if error > rtol * np.abs(R).max() + 32 * max(noise, eager_error) + np.finfo(np.float32).tiny:
            failing.add(name)
    return failing
