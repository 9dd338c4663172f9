# Solutions for notebooks/03_validate_outputs_broadcasting_accumulation.ipynb.
# Each block below replaces the exercise cell of the same tag.

# %% exercise-1
def sum_to(grad, shape):
    # grad: a NumPy array; shape: a tuple. Return a NumPy array of shape `shape`.
    shape = tuple(shape)
    leading = grad.ndim - len(shape)
    result = grad.sum(axis=tuple(range(leading))) if leading else grad
    ones = tuple(i for i, size in enumerate(shape) if size == 1 and result.shape[i] != 1)
    if ones:
        result = result.sum(axis=ones, keepdims=True)
    return result

# %% exercise-2
def diamond_grads(x):
    # x: a float64 NumPy array. Return (grad of h from the exp branch, grad of h from the square branch, x.grad)
    h = np.tanh(x)
    from_exp = np.exp(h)          # d/dh exp(h), times the incoming gradient 1
    from_square = 6 * h           # d/dh 3 h^2
    x_grad = (from_exp + from_square) * (1 - h ** 2)   # TanhBackward0 on the summed buffer
    return from_exp, from_square, x_grad

# %% exercise-3
def predict(p, q, r):
    # p, q, r: np.float32. Return (eager's x.grad, compiled autograd's x.grad), each an np.float32.
    eager = (np.float32(r) + np.float32(q)) + np.float32(p)       # w's node runs first, then v's, then u's
    compiled = (np.float32(p) + np.float32(q)) + np.float32(r)    # the LIFO worklist pops u's node first
    return np.float32(eager), np.float32(compiled)
