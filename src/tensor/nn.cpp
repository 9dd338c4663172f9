// nn: convolution (direct and transposed, 1-d, 2-d and 3-d) and its weight
// grad, batch norm's backward, max/avg/adaptive pooling and max pooling's
// backward, nearest/bilinear upsampling, with ATen's semantics on CPU.
//
// Every kernel works on contiguous buffers. A 1-d or 2-d convolution is run as
// a 3-d one of depth (and height) 1; a 3-d pooling input [C, H, W] is C planes.
// Convolution is im2col + GEMM (kernel::gemm_contiguous, from linalg.cpp);
// its transpose is GEMM + col2im, the adjoint; its weight grad is im2col +
// GEMM again, summed over the batch.
#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "kernel.hpp"

namespace refgrad {
namespace {

// --------------------------------------------------------- im2col/col2im ---

// A sliding window over an image [channels, image_d, image_h, image_w]; it visits
// cols_d x cols_h x cols_w positions. For a convolution, the image is its input and
// the positions are its output pixels. 1-d and 2-d convolutions are 3-d ones of
// depth 1 (and height 1).
struct Window3d {
  std::int64_t channels, image_d, image_h, image_w, cols_d, cols_h, cols_w;
  std::int64_t kernel_d, kernel_h, kernel_w, stride_d, stride_h, stride_w, pad_d, pad_h, pad_w;
  std::int64_t dilation_d, dilation_h, dilation_w;

  std::int64_t positions() const { return cols_d * cols_h * cols_w; }
  // The image coordinate tap `t` of the kernel reads at output position `o`, along one dim.
  static std::int64_t at(std::int64_t o, std::int64_t t, std::int64_t stride, std::int64_t pad, std::int64_t dilation) {
    return o * stride - pad + t * dilation;
  }
};

// The output positions x in [first, last) whose tap reads inside an image row
// of `size`: 0 <= x*stride - pad + tap*dilation < size.
struct InsideRange {
  std::int64_t first, last;
};
InsideRange inside_range(std::int64_t positions, std::int64_t tap, std::int64_t stride, std::int64_t pad,
                         std::int64_t dilation, std::int64_t size) {
  const std::int64_t offset = tap * dilation - pad;  // the image coordinate at x = 0
  // first: the least x with x*stride + offset >= 0; last: the least x with x*stride + offset >= size.
  const auto least_reaching = [&](std::int64_t bound) {
    const std::int64_t need = bound - offset;
    return need <= 0 ? std::int64_t{0} : std::min(positions, (need + stride - 1) / stride);
  };
  const std::int64_t first = least_reaching(0);
  return InsideRange{first, std::max(first, least_reaching(size))};
}

// columns[((c*kernel_d + a)*kernel_h + i)*kernel_w + j][(z*cols_h + y)*cols_w + x] =
//   image[c][z*stride_d - pad_d + a*dilation_d][y*stride_h - pad_h + i*dilation_h][x*stride_w - pad_w + j*dilation_w],
// 0 in the padding. Each row of positions is its padding's zeros around a
// strided copy of the image row.
template <class T>
void im2col(const Window3d& w, const T* image, T* columns) {
  for (std::int64_t c = 0; c < w.channels; ++c)
    for (std::int64_t a = 0; a < w.kernel_d; ++a)
      for (std::int64_t i = 0; i < w.kernel_h; ++i)
        for (std::int64_t j = 0; j < w.kernel_w; ++j) {
          T* row = columns + (((c * w.kernel_d + a) * w.kernel_h + i) * w.kernel_w + j) * w.positions();
          const InsideRange xs = inside_range(w.cols_w, j, w.stride_w, w.pad_w, w.dilation_w, w.image_w);
          for (std::int64_t z = 0; z < w.cols_d; ++z) {
            const std::int64_t d = Window3d::at(z, a, w.stride_d, w.pad_d, w.dilation_d);
            for (std::int64_t y = 0; y < w.cols_h; ++y) {
              const std::int64_t h = Window3d::at(y, i, w.stride_h, w.pad_h, w.dilation_h);
              T* out = row + (z * w.cols_h + y) * w.cols_w;
              if (d < 0 || d >= w.image_d || h < 0 || h >= w.image_h) {
                std::fill(out, out + w.cols_w, T(0));
                continue;
              }
              // (an index, not a pointer: at x = 0 it may lie before the row)
              const std::int64_t base = ((c * w.image_d + d) * w.image_h + h) * w.image_w + j * w.dilation_w - w.pad_w;
              std::fill(out, out + xs.first, T(0));
              for (std::int64_t x = xs.first; x < xs.last; ++x) out[x] = image[base + x * w.stride_w];
              std::fill(out + xs.last, out + w.cols_w, T(0));
            }
          }
        }
}

// The adjoint of im2col: every column entry is added back into the image
// pixel it was read from (padding entries are dropped). `image` is zeroed first.
template <class T>
void col2im(const Window3d& w, const T* columns, T* image) {
  std::fill(image, image + w.channels * w.image_d * w.image_h * w.image_w, T(0));
  for (std::int64_t c = 0; c < w.channels; ++c)
    for (std::int64_t a = 0; a < w.kernel_d; ++a)
      for (std::int64_t i = 0; i < w.kernel_h; ++i)
        for (std::int64_t j = 0; j < w.kernel_w; ++j) {
          const T* row = columns + (((c * w.kernel_d + a) * w.kernel_h + i) * w.kernel_w + j) * w.positions();
          const InsideRange xs = inside_range(w.cols_w, j, w.stride_w, w.pad_w, w.dilation_w, w.image_w);
          for (std::int64_t z = 0; z < w.cols_d; ++z) {
            const std::int64_t d = Window3d::at(z, a, w.stride_d, w.pad_d, w.dilation_d);
            if (d < 0 || d >= w.image_d) continue;
            for (std::int64_t y = 0; y < w.cols_h; ++y) {
              const std::int64_t h = Window3d::at(y, i, w.stride_h, w.pad_h, w.dilation_h);
              if (h < 0 || h >= w.image_h) continue;
              const T* in = row + (z * w.cols_h + y) * w.cols_w;
              const std::int64_t base = ((c * w.image_d + d) * w.image_h + h) * w.image_w + j * w.dilation_w - w.pad_w;
              for (std::int64_t x = xs.first; x < xs.last; ++x) image[base + x * w.stride_w] += in[x];
            }
          }
        }
}

// ------------------------------------------------------------ convolution ---

// ATen's expand_param_if_needed: one value stands for every spatial dim.
IntList expand_param(const char* op, const char* name, const IntList& values, std::size_t spatial_dims) {
  if (values.size() == 1) return IntList(spatial_dims, values[0]);
  check(values.size() == spatial_dims, op, ": expected ", name, " to be a single integer value or a list of ",
        spatial_dims, " values to match the convolution dimensions, but got ", name, "=", shape_text(values));
  return values;
}

// Spatial params of a 1-d or 2-d convolution as the 3-d ones of a depth-1 (and height-1) image:
// {depth, height, width}, the missing leading ones `value_if_missing`.
std::array<std::int64_t, 3> as_3d(const IntList& values, std::int64_t value_if_missing) {
  std::array<std::int64_t, 3> out{value_if_missing, value_if_missing, value_if_missing};
  std::copy(values.begin(), values.end(), out.end() - static_cast<std::ptrdiff_t>(values.size()));
  return out;
}

// A view of `t` with a size-1 dim inserted at `dim` (no copy). Its stride
// never addresses anything; size * stride of the next dim keeps a contiguous
// view contiguous, and 1 does where that product overflows (an empty view may
// have any strides).
// The window of a convolution with everything as 3-d: `image` is what im2col reads (or col2im writes),
// `positions` the tensor whose spatial sizes count the places the window visits; both [N, C, D, H, W].
Window3d window_3d(std::int64_t channels, const Tensor& image, const Tensor& positions,
                   const std::array<std::int64_t, 3>& kernel, const IntList& stride, const IntList& padding,
                   const IntList& dilation) {
  const auto stride3 = as_3d(stride, 1), padding3 = as_3d(padding, 0), dilation3 = as_3d(dilation, 1);
  return Window3d{channels,
                  image.size(2), image.size(3), image.size(4),
                  positions.size(2), positions.size(3), positions.size(4),
                  kernel[0], kernel[1], kernel[2],
                  stride3[0], stride3[1], stride3[2],
                  padding3[0], padding3[1], padding3[2],
                  dilation3[0], dilation3[1], dilation3[2]};
}

// One image's im2col columns, [channels * kernel_d * kernel_h * kernel_w, positions]: often larger than
// input and output, so it is a checked Tensor too, its error naming `op`.
Tensor im2col_buffer(const char* op, const Window3d& w, DType dtype) {
  try {
    return empty({w.channels, w.kernel_d, w.kernel_h, w.kernel_w, w.cols_d, w.cols_h, w.cols_w}, dtype);
  } catch (const Error& error) {
    throw Error(concat(op, ": the im2col buffer: ", error.what()));
  }
}

Tensor with_unit_dim(const Tensor& t, std::size_t dim) {
  Shape sizes = t.sizes(), strides = t.strides();
  std::int64_t stride = 1;
  if (dim < sizes.size() && __builtin_mul_overflow(sizes[dim], strides[dim], &stride)) stride = 1;
  sizes.insert(sizes.begin() + dim, 1);
  strides.insert(strides.begin() + dim, stride);
  return Tensor(t.storage(), sizes, strides, t.storage_offset(), t.dtype());
}

// A view of `t` without its size-1 dim `dim` (no copy).
Tensor without_unit_dim(const Tensor& t, std::size_t dim) {
  Shape sizes = t.sizes(), strides = t.strides();
  sizes.erase(sizes.begin() + dim);
  strides.erase(strides.begin() + dim);
  return Tensor(t.storage(), sizes, strides, t.storage_offset(), t.dtype());
}

// A view of a 1-d or 2-d convolution's [N, C, (H,) W] tensor as the 3-d one's [N, C, 1, (1,) H, W].
Tensor as_5d(const Tensor& t) {
  Tensor r = t;
  while (r.dim() < 5) r = with_unit_dim(r, 2);
  return r;
}

template <class T>
void convolution_kernel(const Tensor& input, const Tensor& weight, const OptionalTensor& bias, Tensor& output,
                        bool transposed, std::int64_t groups, Window3d window, const Tensor& column_buffer) {
  const std::int64_t batch = input.size(0);
  const std::int64_t in_channels = input.size(1), out_channels = output.size(1);
  const std::int64_t group_in = in_channels / groups, group_out = out_channels / groups;
  const std::int64_t in_plane = input.size(2) * input.size(3) * input.size(4);
  const std::int64_t out_plane = output.size(2) * output.size(3) * output.size(4);
  const std::int64_t patch = window.kernel_d * window.kernel_h * window.kernel_w;
  const T* in = input.data_ptr<T>();
  const T* w = weight.data_ptr<T>();
  T* out = output.data_ptr<T>();
  // Images in chunks of about 2^21 multiply-adds, each chunk with its own im2col columns (the first chunk's are
  // column_buffer, allocated and checked against the memory limit by the caller; the others' are the same size).
  const std::size_t column_bytes = static_cast<std::size_t>(column_buffer.numel()) * sizeof(T);
  const std::int64_t image_work =
      std::max<std::int64_t>(1, out_channels * group_in * patch * (transposed ? in_plane : out_plane));
  const std::int64_t images_per_chunk = std::max<std::int64_t>(1, (std::int64_t{1} << 21) / image_work);
  kernel::parallel_ranges(batch, images_per_chunk, [&](std::int64_t first, std::int64_t last) {
    std::shared_ptr<void> own_columns = first == 0 ? nullptr : allocate_cpu_buffer(column_bytes);
    T* columns = first == 0 ? column_buffer.data_ptr<T>() : static_cast<T*>(own_columns.get());
    for (std::int64_t n = first; n < last; ++n) {
      for (std::int64_t g = 0; g < groups; ++g) {
        const T* in_g = in + (n * in_channels + g * group_in) * in_plane;
        T* out_g = out + (n * out_channels + g * group_out) * out_plane;
        if (!transposed) {
          // out_g [group_out, positions] = weight_g [group_out, group_in*patch] @ columns.
          const T* weight_g = w + g * group_out * group_in * patch;
          im2col(window, in_g, columns);
          kernel::gemm_contiguous(false, false, group_out, out_plane, group_in * patch, weight_g, columns, out_g);
        } else {
          // The adjoint: columns = weight_g^T @ in_g, with weight_g [group_in, group_out*patch],
          // then col2im scatters the columns into the (larger) output image.
          const T* weight_g = w + g * group_in * group_out * patch;
          kernel::gemm_contiguous(true, false, group_out * patch, in_plane, group_in, weight_g, in_g, columns);
          col2im(window, columns, out_g);
        }
      }
    }
  });

  if (bias) {
    const T* b = bias->data_ptr<T>();
    for (std::int64_t n = 0; n < batch; ++n)
      for (std::int64_t c = 0; c < out_channels; ++c) {
        T* plane = out + (n * out_channels + c) * out_plane;
        for (std::int64_t p = 0; p < out_plane; ++p) plane[p] += b[c];
      }
  }
}

// aten::convolution for 1-d, 2-d and 3-d; `op` names the public entry point in errors.
Tensor convolution_impl(const char* op, const Tensor& input, const Tensor& weight, const OptionalTensor& bias_arg,
                        const IntList& stride_arg, const IntList& padding_arg, const IntList& dilation_arg,
                        bool transposed, const IntList& output_padding_arg, std::int64_t groups) {
  check(input.defined() && weight.defined(), op, ": input and weight must be defined");
  if (kernel::is_storage_format(input))  // computed in float32, rounded once (opmath)
    return kernel::rounded_to(convolution_impl(op, kernel::to_opmath(input), kernel::to_opmath(weight),
                                               kernel::to_opmath(bias_arg), stride_arg, padding_arg, dilation_arg,
                                               transposed, output_padding_arg, groups),
                              input.dtype());
  // An undefined bias is no bias, as an undefined optional Tensor in ATen.
  const OptionalTensor bias = bias_arg && bias_arg->defined() ? bias_arg : std::nullopt;
  check(weight.dim() >= 3, op, ": weight should have at least three dimensions, got weight of shape ",
        shape_text(weight.sizes()));
  check(weight.dim() <= 5, op, ": only 1-d, 2-d and 3-d convolutions are implemented, got weight of shape ",
        shape_text(weight.sizes()));
  const std::size_t k = static_cast<std::size_t>(weight.dim() - 2);
  const IntList stride = expand_param(op, "stride", stride_arg, k);
  const IntList padding = expand_param(op, "padding", padding_arg, k);
  const IntList dilation = expand_param(op, "dilation", dilation_arg, k);
  const IntList output_padding = expand_param(op, "output_padding", output_padding_arg, k);
  const auto all = [](const IntList& values, auto predicate) {
    return std::all_of(values.begin(), values.end(), predicate);
  };
  check(all(stride, [](std::int64_t s) { return s > 0; }), op, ": non-positive stride is not supported, got stride=",
        shape_text(stride));
  check(all(padding, [](std::int64_t p) { return p >= 0; }), op,
        ": negative padding is not supported, got padding=", shape_text(padding));
  check(all(output_padding, [](std::int64_t p) { return p >= 0; }), op,
        ": negative output_padding is not supported, got output_padding=", shape_text(output_padding));
  check(all(dilation, [](std::int64_t d) { return d > 0; }), op, ": dilation should be greater than zero, but got ",
        shape_text(dilation));
  check(groups > 0, op, ": non-positive groups is not supported, got groups=", groups);

  check(input.dim() == weight.dim(), op, ": expected ", weight.dim(), "-dimensional input for ", weight.dim(),
        "-dimensional weight ", shape_text(weight.sizes()), ", but got ", input.dim(), "-dimensional input of size ",
        shape_text(input.sizes()), " instead");
  // The bias may have another dtype: ATen converts it to the input's.
  check(weight.dtype() == input.dtype(), op, ": input (", dtype_name(input.dtype()), ") and weight (",
        dtype_name(weight.dtype()), ") must have the same dtype");
  check(input.dtype() != DType::Bool, op, ": not implemented for bool tensors (float32, float64 and int64 are)");

  check(weight.size(0) >= groups, op, ": given groups=", groups, ", expected weight to be at least ", groups,
        " at dimension 0, but got weight of size ", shape_text(weight.sizes()), " instead");
  check(weight.size(0) % groups == 0, op, ": given groups=", groups, ", expected weight to be divisible by ",
        groups, " at dimension 0, but got weight of size ", shape_text(weight.sizes()), " instead");
  const std::int64_t in_channels = input.size(1);
  // Sizes and params from a program may be anything: the products below are
  // checked for int64 overflow.
  const std::int64_t expected_in = transposed ? weight.size(0) : multiply_or_fail(weight.size(1), groups, op);
  const std::string given = transposed ? std::string("transposed=1") : concat("groups=", groups);
  check(in_channels == expected_in, op, ": given ", given, ", weight of size ", shape_text(weight.sizes()),
        ", expected input", shape_text(input.sizes()), " to have ", expected_in, " channels, but got ", in_channels,
        " channels instead");
  const std::int64_t out_channels = transposed ? multiply_or_fail(weight.size(1), groups, op) : weight.size(0);
  check(!bias || (bias->dim() == 1 && bias->size(0) == out_channels), op, ": given ",
        transposed ? "transposed=1, " : "", "weight of size ", shape_text(weight.sizes()),
        ", expected bias to be 1-dimensional with ", out_channels, " elements, but got bias of size ",
        bias ? str(bias->sizes()) : "", " instead");

  const IntList kernel(weight.sizes().begin() + 2, weight.sizes().end());
  const IntList in_size(input.sizes().begin() + 2, input.sizes().end());
  check(all(kernel, [](std::int64_t s) { return s > 0; }), op,
        ": kernel size should be greater than zero, but got weight of shape ", shape_text(weight.sizes()));
  IntList out_size(k);
  if (!transposed) {
    IntList padded(k), dilated_kernel(k);
    for (std::size_t d = 0; d < k; ++d) {
      padded[d] = add_or_fail(in_size[d], multiply_or_fail(2, padding[d], op), op);
      dilated_kernel[d] = add_or_fail(multiply_or_fail(dilation[d], kernel[d] - 1, op), 1, op);
      out_size[d] = (padded[d] - dilated_kernel[d]) / stride[d] + 1;
    }
    for (std::size_t d = 0; d < k; ++d)
      check(padded[d] >= dilated_kernel[d], op, ": calculated padded input size per channel: ", shape_text(padded),
            ". Kernel size: ", shape_text(dilated_kernel), ". Kernel size can't be greater than actual input size");
  } else {
    for (std::size_t d = 0; d < k; ++d) {
      check(output_padding[d] < stride[d] || output_padding[d] < dilation[d], op,
            ": output padding must be smaller than either stride or dilation, but got output_padding=",
            shape_text(output_padding), ", stride=", shape_text(stride), ", dilation=", shape_text(dilation));
      // (in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1
      const std::int64_t spread = multiply_or_fail(in_size[d] - 1, stride[d], op);
      const std::int64_t dilated = multiply_or_fail(dilation[d], kernel[d] - 1, op);
      out_size[d] = add_or_fail(add_or_fail(spread, -multiply_or_fail(2, padding[d], op), op),
                                add_or_fail(dilated, add_or_fail(output_padding[d], 1, op), op), op);
    }
    for (std::size_t d = 0; d < k; ++d)
      check(out_size[d] > 0, op, ": given input size per channel ", shape_text(in_size),
            ", the calculated output size per channel ", shape_text(out_size), " is too small");
  }
  const bool empty_image = std::any_of(in_size.begin(), in_size.end(), [](std::int64_t s) { return s == 0; });
  check(!empty_image || input.size(0) == 0 || in_channels == 0, op,
        ": only zero batch or zero channel inputs are supported, but got input shape ", shape_text(input.sizes()));

  Shape out_shape = {input.size(0), out_channels};
  out_shape.insert(out_shape.end(), out_size.begin(), out_size.end());
  // ATen's "Empty" backend: an input without channels gives an output without
  // channels (not out_channels of zeros and bias), whatever the weight.
  if (in_channels == 0) out_shape[1] = 0;
  Tensor output = empty(out_shape, input.dtype());
  if (output.numel() == 0) return output;

  // Everything as 3-d: a 2-d convolution is one of depth 1, a 1-d one of depth and height 1.
  const Tensor input5 = kernel::contiguous_as(as_5d(input), input.dtype());
  const Tensor weight5 = kernel::contiguous_as(as_5d(weight), input.dtype());
  const OptionalTensor bias1 = bias ? OptionalTensor(kernel::contiguous_as(*bias, input.dtype())) : std::nullopt;
  Tensor output5 = as_5d(output);
  // The image im2col reads (direct) or col2im writes (transposed), and the
  // positions the window visits on it.
  const Tensor& image = transposed ? output5 : input5;
  const Tensor& positions = transposed ? input5 : output5;
  const Window3d window = window_3d(transposed ? out_channels / groups : in_channels / groups, image, positions,
                                    {weight5.size(2), weight5.size(3), weight5.size(4)}, stride, padding, dilation);
  const Tensor columns = im2col_buffer(op, window, input.dtype());
  kernel::dispatch(input.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>)
      convolution_kernel<T>(input5, weight5, bias1, output5, transposed, groups, window, columns);
  });
  return with_rounding_noise(output);
}

// conv1d/conv2d/conv_transpose*d accept an unbatched input (one dim fewer):
// it gets a batch dim of 1 for the convolution, which the result loses again.
Tensor with_optional_batch(const char* op, std::int64_t spatial_dims, const Tensor& input,
                           const std::function<Tensor(const Tensor&)>& convolve) {
  check(input.defined(), op, ": input is undefined");
  const std::int64_t batched_dim = spatial_dims + 2;
  check(input.dim() == batched_dim || input.dim() == batched_dim - 1, op, ": expected ", batched_dim - 1,
        "-d (unbatched) or ", batched_dim, "-d (batched) input, but got input of size ", shape_text(input.sizes()));
  if (input.dim() == batched_dim) return convolve(input);
  return without_unit_dim(convolve(with_unit_dim(input, 0)), 0);
}

// ------------------------------------------------- convolution weight grad ---

// How the weight grad's sum over the batch is cut: chunks of the returned number of images, each
// summing its own partial weight grad (the first straight into the result), added in chunk order at
// the end. A chunk is at least 2^21 multiply-adds (or one image); there are at most 16 chunks, and their
// partials hold at most 2^22 elements together, so a large weight is summed by few chunks (a single
// chunk's products run on several threads themselves, cut by gemm). The cut depends on the sizes alone:
// any thread count gives the same bits.
std::int64_t weight_grad_images_per_chunk(std::int64_t batch, std::int64_t weight_numel, std::int64_t positions) {
  constexpr std::int64_t kWorkPerChunk = std::int64_t{1} << 21, kMaxChunks = 16;
  constexpr std::int64_t kPartialElements = std::int64_t{1} << 22;
  std::int64_t image_work = 0;  // multiply-adds per image
  if (__builtin_mul_overflow(weight_numel, positions, &image_work))
    image_work = std::numeric_limits<std::int64_t>::max();
  const std::int64_t by_work = std::max<std::int64_t>(1, kWorkPerChunk / std::max<std::int64_t>(image_work, 1));
  const std::int64_t max_chunks =
      std::min(kMaxChunks, std::max<std::int64_t>(1, kPartialElements / std::max<std::int64_t>(weight_numel, 1)));
  return std::max(by_work, (batch + max_chunks - 1) / max_chunks);
}

// grad_weight_g [rows, taps] = sum_n left_g[n] [rows, positions] @ im2col(image_g[n])^T [positions, taps] for
// each group g, taps = window.channels * kernel size. A direct convolution's forward read its input
// through the window: left is grad_output and image the input. A transposed one wrote its output through
// it: left is its input and image grad_output. grad_weight is contiguous, [groups * rows, taps] as a matrix.
template <class T>
void convolution_weight_grad_kernel(const Tensor& left, const Tensor& image, std::int64_t groups,
                                    const Window3d& window, const Tensor& column_buffer, Tensor& grad_weight) {
  const std::int64_t batch = left.size(0);
  const std::int64_t rows = left.size(1) / groups;
  const std::int64_t taps = window.channels * window.kernel_d * window.kernel_h * window.kernel_w;
  const std::int64_t positions = window.positions();
  const std::int64_t image_plane = image.size(2) * image.size(3) * image.size(4);
  const std::int64_t weight_numel = grad_weight.numel();
  const std::int64_t images_per_chunk = weight_grad_images_per_chunk(batch, weight_numel, positions);
  const std::int64_t chunks = kernel::chunk_count(batch, images_per_chunk);
  // Chunk k > 0 sums into partials[k - 1].
  const Tensor partials = chunks > 1 ? empty({chunks - 1, weight_numel}, grad_weight.dtype()) : Tensor();
  const T* left_data = left.data_ptr<T>();
  const T* image_data = image.data_ptr<T>();
  const std::size_t column_bytes = static_cast<std::size_t>(column_buffer.numel()) * sizeof(T);
  kernel::parallel_ranges(batch, images_per_chunk, [&](std::int64_t first, std::int64_t last) {
    const std::int64_t chunk = first / images_per_chunk;
    T* sum = chunk == 0 ? grad_weight.data_ptr<T>() : partials.data_ptr<T>() + (chunk - 1) * weight_numel;
    std::shared_ptr<void> own_columns = chunk == 0 ? nullptr : allocate_cpu_buffer(column_bytes);
    T* columns = chunk == 0 ? column_buffer.data_ptr<T>() : static_cast<T*>(own_columns.get());
    for (std::int64_t n = first; n < last; ++n)
      for (std::int64_t g = 0; g < groups; ++g) {
        im2col(window, image_data + (n * image.size(1) + g * window.channels) * image_plane, columns);
        const T* left_g = left_data + (n * left.size(1) + g * rows) * positions;
        // The chunk's first image overwrites its sum, the others add to it.
        kernel::gemm_contiguous(false, true, rows, taps, positions, left_g, columns, sum + g * rows * taps,
                                /*accumulate=*/n > first);
      }
  });
  T* total = grad_weight.data_ptr<T>();
  for (std::int64_t chunk = 1; chunk < chunks; ++chunk) {
    const T* partial = partials.data_ptr<T>() + (chunk - 1) * weight_numel;
    for (std::int64_t i = 0; i < weight_numel; ++i) {
      if constexpr (std::is_same_v<T, std::int64_t>) total[i] = kernel::wrapping_add(total[i], partial[i]);
      else total[i] += partial[i];
    }
  }
}

// ------------------------------------------------------------- batch norm ---

// One channel's sums over its N planes of `plane` elements, `stride` apart in input and grad:
// sum(g) and sum((x - mean) * g), in double. Contiguous elements go to eight partial sums in turn (which
// the compiler keeps in vector registers), added pairwise at the end: the order depends on the sizes alone.
struct ChannelSums {
  double grad, grad_times_centered;
};

template <class T>
ChannelSums channel_sums(const T* x, const T* g, std::int64_t planes, std::int64_t plane, std::int64_t stride,
                         T mean) {
  double sums[8] = {}, dots[8] = {};
  double sum_tail = 0, dot_tail = 0;
  for (std::int64_t n = 0; n < planes; ++n) {
    const T* xs = x + n * stride;
    const T* gs = g + n * stride;
    std::int64_t i = 0;
    for (; i + 8 <= plane; i += 8)
      for (int lane = 0; lane < 8; ++lane) {
        const double grad = gs[i + lane];
        sums[lane] += grad;
        dots[lane] += static_cast<double>(xs[i + lane] - mean) * grad;
      }
    for (; i < plane; ++i) {
      sum_tail += gs[i];
      dot_tail += static_cast<double>(xs[i] - mean) * gs[i];
    }
  }
  const auto total = [](const double (&lanes)[8], double tail) {
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])) + tail;
  };
  return {total(sums, sum_tail), total(dots, dot_tail)};
}

// native_batch_norm_backward on contiguous [N, C, plane] input and grad, channel by channel: one pass for
// the sums, one writing the input's grad. weight, mean and invstd hold C values each; the outputs that
// are not asked for are null.
template <class T>
void batch_norm_backward_kernel(const Tensor& grad, const Tensor& input, const T* weight, const T* mean,
                                const T* invstd, bool train, T* grad_input, T* grad_weight, T* grad_bias) {
  const std::int64_t batch = input.size(0), channels = input.size(1);
  const std::int64_t plane = input.numel() / std::max<std::int64_t>(batch * channels, 1);
  const std::int64_t count = batch * plane;  // the elements of one channel
  const T* x = input.data_ptr<T>();
  const T* g = grad.data_ptr<T>();
  const std::int64_t stride = channels * plane;  // from one image's plane to the next's
  const bool need_sums = (grad_input && train) || grad_weight || grad_bias;
  const std::int64_t channels_per_chunk =
      std::max<std::int64_t>(1, kernel::kElementwiseGrain / std::max<std::int64_t>(count, 1));
  kernel::parallel_ranges(channels, channels_per_chunk, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t c = first; c < last; ++c) {
      const std::int64_t offset = c * plane;
      const T w = weight ? weight[c] : T(1), mean_c = mean[c], invstd_c = invstd[c];
      const ChannelSums sums =
          need_sums ? channel_sums(x + offset, g + offset, batch, plane, stride, mean_c) : ChannelSums{0, 0};
      if (grad_input) {
        // ATen's order of operations: (g - grad_mean - (x - mean) * k) * invstd * w, with
        // grad_mean = sum(g) / M and k = sum((x - mean) * g) * invstd^2 / M.
        const T grad_mean = static_cast<T>(sums.grad / static_cast<double>(count));
        const T k = static_cast<T>(sums.grad_times_centered * invstd_c * invstd_c / static_cast<double>(count));
        for (std::int64_t n = 0; n < batch; ++n) {
          const T* xs = x + offset + n * stride;
          const T* gs = g + offset + n * stride;
          T* out = grad_input + offset + n * stride;
          if (train)
            for (std::int64_t i = 0; i < plane; ++i) out[i] = (gs[i] - grad_mean - (xs[i] - mean_c) * k) * invstd_c * w;
          else
            for (std::int64_t i = 0; i < plane; ++i) out[i] = gs[i] * invstd_c * w;
        }
      }
      // sum(g * x_hat) = sum((x - mean) * g) * invstd
      if (grad_weight) grad_weight[c] = static_cast<T>(sums.grad_times_centered * invstd_c);
      if (grad_bias) grad_bias[c] = static_cast<T>(sums.grad);
    }
  });
}

// ------------------------------------------------------------- max pooling ---

// grad_input[p][indices[p][o]] += grad[p][o] for each of `planes` planes (grad_input zeroed first); -1
// skips an output. Returns the position in grad of the first index outside [0, plane) (not -1), or -1:
// each chunk stops at its first, and the first chunk's is reported, whatever thread ran it.
template <class T>
std::int64_t max_pool_backward_kernel(const T* grad, const std::int64_t* indices, T* grad_input, std::int64_t planes,
                                      std::int64_t outputs_per_plane, std::int64_t plane) {
  const std::int64_t planes_per_chunk =
      std::max<std::int64_t>(1, kernel::kElementwiseGrain / std::max<std::int64_t>(plane + outputs_per_plane, 1));
  std::vector<std::int64_t> first_bad(static_cast<std::size_t>(kernel::chunk_count(planes, planes_per_chunk)), -1);
  kernel::parallel_ranges(planes, planes_per_chunk, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t p = first; p < last; ++p) {
      T* out = grad_input + p * plane;
      std::fill(out, out + plane, T(0));
      const std::int64_t at = p * outputs_per_plane;
      for (std::int64_t o = at; o < at + outputs_per_plane; ++o) {
        const std::int64_t index = indices[o];
        if (index == -1) continue;
        if (index < 0 || index >= plane) {
          first_bad[static_cast<std::size_t>(first / planes_per_chunk)] = o;
          return;
        }
        out[index] += grad[o];
      }
    }
  });
  for (std::int64_t bad : first_bad)
    if (bad >= 0) return bad;
  return -1;
}

// ---------------------------------------------------------------- pooling ---

// Floor division, also for negative numerators (ATen's div_rtn).
std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  const std::int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) --q;
  return q;
}

struct Pool2dParams {
  std::int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
};

// ATen's pooling kernels take their parameters as int and raise for larger
// values; refgrad does too, which also keeps the window arithmetic in int64.
void check_fits_int(const char* op, const char* name, const IntList& values) {
  for (std::int64_t v : values)
    check(v >= std::numeric_limits<int>::min() && v <= std::numeric_limits<int>::max(), op, ": ", name, "=",
          shape_text(values), " does not fit in int, as ATen's pooling kernels need");
}

// kernel_size, stride (empty: the kernel), padding and dilation, each one
// value or two (H, W), as max_pool2d and avg_pool2d take them.
Pool2dParams pool_params(const char* op, const IntList& kernel_size, const IntList& stride, const IntList& padding,
                         const IntList& dilation) {
  check(kernel_size.size() == 1 || kernel_size.size() == 2, op,
        ": kernel_size must either be a single int, or a tuple of two ints, got ", shape_text(kernel_size));
  check(stride.empty() || stride.size() == 1 || stride.size() == 2, op,
        ": stride must either be omitted, a single int, or a tuple of two ints, got ", shape_text(stride));
  check(padding.size() == 1 || padding.size() == 2, op,
        ": padding must either be a single int, or a tuple of two ints, got ", shape_text(padding));
  check(dilation.size() == 1 || dilation.size() == 2, op,
        ": dilation must be either a single int, or a tuple of two ints, got ", shape_text(dilation));
  check_fits_int(op, "kernel_size", kernel_size);
  check_fits_int(op, "stride", stride);
  check_fits_int(op, "padding", padding);
  check_fits_int(op, "dilation", dilation);
  const IntList& s = stride.empty() ? kernel_size : stride;
  return {kernel_size.front(), kernel_size.back(), s.front(),        s.back(),
          padding.front(),     padding.back(),     dilation.front(), dilation.back()};
}

// ATen's pooling_output_shape, with its checks on one spatial dim.
std::int64_t pooling_output_size(const char* op, std::int64_t input_size, std::int64_t kernel, std::int64_t pad,
                                 std::int64_t stride, std::int64_t dilation, bool ceil_mode) {
  // The parameters fit in int (pool_params), so only sums with the input size
  // (huge next to an empty batch dim) can overflow int64.
  const std::int64_t effective_kernel = (kernel - 1) * dilation + 1;
  check(stride != 0, op, ": stride should not be zero");
  check(pad >= 0, op, ": pad must be non-negative, but got pad: ", pad);
  check(pad <= effective_kernel / 2, op, ": pad should be at most half of effective kernel size, but got pad=", pad,
        ", kernel_size=", kernel, " and dilation=", dilation);
  // pool2d_shape_check rejects these next, as in ATen; the size is not used.
  if (kernel <= 0 || stride <= 0 || dilation <= 0) return 0;
  const std::int64_t span = add_or_fail(input_size, 2 * pad - effective_kernel, op);
  std::int64_t size = add_or_fail(floor_div(add_or_fail(span, ceil_mode ? stride - 1 : 0, op), stride), 1, op);
  // In ceil mode the last window must still start inside the image or its left padding.
  if (ceil_mode && (size - 1) * stride - pad >= input_size) --size;
  return size;
}

// The first tap of a window starting at `start` (maybe in the padding) that
// lies at or after 0: start + ceil(-start / dilation) * dilation.
std::int64_t first_tap_inside(std::int64_t start, std::int64_t dilation) {
  return start >= 0 ? start : start + (-start + dilation - 1) / dilation * dilation;
}

// ATen's pool2d_shape_check, after the output size is known.
void pool2d_shape_check(const char* op, const Tensor& input, const Pool2dParams& p, std::int64_t out_h,
                        std::int64_t out_w) {
  check(p.kernel_h > 0 && p.kernel_w > 0, op, ": kernel size should be greater than zero, but got kH: ", p.kernel_h,
        " kW: ", p.kernel_w);
  check(p.stride_h > 0 && p.stride_w > 0, op, ": stride should be greater than zero, but got dH: ", p.stride_h,
        " dW: ", p.stride_w);
  check(p.dilation_h > 0 && p.dilation_w > 0, op, ": dilation should be greater than zero, but got dilationH: ",
        p.dilation_h, " dilationW: ", p.dilation_w);
  const std::int64_t ndim = input.dim();
  // Only the batch dim of a 4-d input may be empty.
  bool non_empty = true;
  for (std::int64_t d = ndim - 3; d < ndim; ++d) non_empty = non_empty && input.size(d) != 0;
  check(non_empty, op, ": expected a 3-d or 4-d (batch mode) input with optional 0 dim batch size, but got ",
        shape_text(input.sizes()));
  // Stricter than the effective-kernel bound of pooling_output_size when dilated.
  check(p.pad_h <= p.kernel_h / 2 && p.pad_w <= p.kernel_w / 2, op,
        ": pad should be smaller than or equal to half of kernel size, but got padW = ", p.pad_w, ", padH = ",
        p.pad_h, ", kW = ", p.kernel_w, ", kH = ", p.kernel_h);
  check(out_h >= 1 && out_w >= 1, op, ": given input size ", shape_text(input.sizes()), ", the calculated output size [",
        out_h, ",", out_w, "] is too small");
}

// The checked input of a pooling op: its dtype, 3-d or 4-d, and the planes.
void check_pool_input(const char* op, const Tensor& self, bool allow_int64) {
  check(self.defined(), op, ": input is undefined");
  check(self.dim() == 3 || self.dim() == 4, op, ": expected a 3-d or 4-d (batch mode) input, but got input of size ",
        shape_text(self.sizes()));
  const bool supported = self.is_floating_point() || (allow_int64 && self.dtype() == DType::Int64);
  check(supported, op, ": not implemented for ", dtype_name(self.dtype()), " tensors (float32, float64",
        allow_int64 ? " and int64 are)" : " are)");
}

// The output shape: the input's leading dims, then out_h, out_w.
Shape pooled_shape(const Tensor& self, std::int64_t out_h, std::int64_t out_w) {
  Shape shape(self.sizes().begin(), self.sizes().end() - 2);
  shape.push_back(out_h);
  shape.push_back(out_w);
  return shape;
}

std::int64_t planes_of(const Tensor& self) { return numel_of(Shape(self.sizes().begin(), self.sizes().end() - 2)); }

// ----------------------------------------------------------- upsampling ---

// ATen's compute_scales_value: a given positive scale factor wins over the
// size ratio. A scale so small that 1 / scale overflows T would make ATen
// convert an infinite source index to int64 (undefined behaviour): refused.
template <class T>
T source_scale(const char* op, const char* name, std::int64_t input_size, std::int64_t output_size,
               std::optional<double> scale) {
  if (!(scale && *scale > 0)) return static_cast<T>(input_size) / static_cast<T>(output_size);
  const double ratio = 1.0 / *scale;
  check(ratio <= std::numeric_limits<T>::max(), op, ": ", name, "=", *scale, " is too small: 1/", name,
        " overflows ", dtype_name(dtype_of<T>()));
  return static_cast<T>(ratio);
}

// The source index scale ATen uses (area_pixel_compute_scale): with
// align_corners the corner pixels of input and output line up.
template <class T>
T upsample_scale(const char* op, const char* name, std::int64_t input_size, std::int64_t output_size,
                 bool align_corners, std::optional<double> scale) {
  if (align_corners)
    return output_size > 1 ? static_cast<T>(input_size - 1) / static_cast<T>(output_size - 1) : T(0);
  return source_scale<T>(op, name, input_size, output_size, scale);
}

// min(floor(real), input_size - 1) as ATen's nearest_idx and
// guard_index_and_lambda compute it (floorf), for real >= 0; a real beyond
// the last index (even inf) gives the last index without converting it.
template <class T>
std::int64_t last_index_at_most(T real, std::int64_t input_size) {
  if (!(real < static_cast<T>(input_size - 1))) return input_size - 1;
  return std::min(static_cast<std::int64_t>(std::floor(static_cast<float>(real))), input_size - 1);
}

void check_upsample(const char* op, const Tensor& self, const IntList& output_size) {
  check(self.defined(), op, ": input is undefined");
  check(output_size.size() == 2, op, ": expected output_size to have 2 elements, but got ", shape_text(output_size));
  check(self.dim() == 4, op, ": expected a 4-d input [N,C,H,W], but got input of size ", shape_text(self.sizes()));
  check(self.size(2) > 0 && self.size(3) > 0 && output_size[0] > 0 && output_size[1] > 0, op,
        ": input and output sizes should be greater than 0, but got input of size ", shape_text(self.sizes()),
        " and output_size ", shape_text(output_size));
  check(self.size(1) > 0, op, ": expected a non-empty 4-d input, but got input of size ", shape_text(self.sizes()));
  check(self.is_floating_point(), op, ": not implemented for ", dtype_name(self.dtype()),
        " tensors (float32 and float64 are)");
}

}  // namespace

// ------------------------------------------------------------ convolution ---

Tensor convolution(const Tensor& input, const Tensor& weight, const OptionalTensor& bias, const IntList& stride,
                   const IntList& padding, const IntList& dilation, bool transposed,
                   const IntList& output_padding, std::int64_t groups) {
  return convolution_impl("convolution", input, weight, bias, stride, padding, dilation, transposed,
                          output_padding, groups);
}

Tensor conv1d(const Tensor& input, const Tensor& weight, const OptionalTensor& bias, const IntList& stride,
              const IntList& padding, const IntList& dilation, std::int64_t groups) {
  return with_optional_batch("conv1d", 1, input, [&](const Tensor& batched) {
    return convolution_impl("conv1d", batched, weight, bias, stride, padding, dilation, false, {0}, groups);
  });
}

Tensor conv2d(const Tensor& input, const Tensor& weight, const OptionalTensor& bias, const IntList& stride,
              const IntList& padding, const IntList& dilation, std::int64_t groups) {
  return with_optional_batch("conv2d", 2, input, [&](const Tensor& batched) {
    return convolution_impl("conv2d", batched, weight, bias, stride, padding, dilation, false, {0}, groups);
  });
}

Tensor conv3d(const Tensor& input, const Tensor& weight, const OptionalTensor& bias, const IntList& stride,
              const IntList& padding, const IntList& dilation, std::int64_t groups) {
  return with_optional_batch("conv3d", 3, input, [&](const Tensor& batched) {
    return convolution_impl("conv3d", batched, weight, bias, stride, padding, dilation, false, {0}, groups);
  });
}

Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const OptionalTensor& bias,
                        const IntList& stride, const IntList& padding, const IntList& output_padding,
                        std::int64_t groups, const IntList& dilation) {
  return with_optional_batch("conv_transpose1d", 1, input, [&](const Tensor& batched) {
    return convolution_impl("conv_transpose1d", batched, weight, bias, stride, padding, dilation, true,
                            output_padding, groups);
  });
}

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const OptionalTensor& bias,
                        const IntList& stride, const IntList& padding, const IntList& output_padding,
                        std::int64_t groups, const IntList& dilation) {
  return with_optional_batch("conv_transpose2d", 2, input, [&](const Tensor& batched) {
    return convolution_impl("conv_transpose2d", batched, weight, bias, stride, padding, dilation, true,
                            output_padding, groups);
  });
}

Tensor conv_transpose3d(const Tensor& input, const Tensor& weight, const OptionalTensor& bias,
                        const IntList& stride, const IntList& padding, const IntList& output_padding,
                        std::int64_t groups, const IntList& dilation) {
  return with_optional_batch("conv_transpose3d", 3, input, [&](const Tensor& batched) {
    return convolution_impl("conv_transpose3d", batched, weight, bias, stride, padding, dilation, true,
                            output_padding, groups);
  });
}

// ------------------------------------------------- convolution weight grad ---

Tensor convolution_backward_weight(const Tensor& grad_output, const Tensor& input, const Shape& weight_sizes,
                                   const IntList& stride_arg, const IntList& padding_arg, const IntList& dilation_arg,
                                   bool transposed, std::int64_t groups) {
  const char* op = "convolution_backward_weight";
  check(grad_output.defined() && input.defined(), op, ": grad_output and input must be defined");
  if (kernel::is_storage_format(input) || kernel::is_storage_format(grad_output))  // in float32, rounded once
    return kernel::rounded_to(convolution_backward_weight(kernel::to_opmath(grad_output), kernel::to_opmath(input),
                                                          weight_sizes, stride_arg, padding_arg, dilation_arg,
                                                          transposed, groups),
                              input.dtype());
  check(weight_sizes.size() >= 3 && weight_sizes.size() <= 5, op,
        ": only 1-d, 2-d and 3-d convolutions are implemented, got weight of shape ", shape_text(weight_sizes));
  const auto dims = static_cast<std::int64_t>(weight_sizes.size());
  check(input.dim() == dims && grad_output.dim() == dims, op, ": input ", shape_text(input.sizes()),
        " and grad_output ", shape_text(grad_output.sizes()), " must have as many dims as the weight ",
        shape_text(weight_sizes));
  check(grad_output.dtype() == input.dtype(), op, ": grad_output (", dtype_name(grad_output.dtype()),
        ") and input (", dtype_name(input.dtype()), ") must have the same dtype");
  check(input.dtype() == DType::Float32 || input.dtype() == DType::Float64 || input.dtype() == DType::Int64, op,
        ": not implemented for ", dtype_name(input.dtype()), " tensors (float32, float64 and int64 are)");
  const std::size_t k = weight_sizes.size() - 2;
  const IntList stride = expand_param(op, "stride", stride_arg, k);
  const IntList padding = expand_param(op, "padding", padding_arg, k);
  const IntList dilation = expand_param(op, "dilation", dilation_arg, k);
  for (std::size_t d = 0; d < k; ++d)
    check(stride[d] > 0 && padding[d] >= 0 && dilation[d] > 0 && weight_sizes[2 + d] > 0, op,
          ": expected positive stride, dilation and kernel size and non-negative padding, got stride=",
          shape_text(stride), ", padding=", shape_text(padding), ", dilation=", shape_text(dilation),
          " and weight of shape ", shape_text(weight_sizes));
  check(groups > 0 && weight_sizes[0] % groups == 0, op, ": weight of shape ", shape_text(weight_sizes),
        " does not split into groups=", groups, " along dim 0");
  // Direct: input [N, C, ...] -> grad_output [N, O, ...], weight [O, C/groups, ...];
  // transposed: input [N, C, ...] -> grad_output [N, O, ...], weight [C, O/groups, ...].
  const std::int64_t in_channels = transposed ? weight_sizes[0] : multiply_or_fail(weight_sizes[1], groups, op);
  const std::int64_t out_channels = transposed ? multiply_or_fail(weight_sizes[1], groups, op) : weight_sizes[0];
  // The output's spatial sizes the weight and parameters allow: the direct convolution's size, or the range a
  // transposed one covers with output_padding in [0, max(stride, dilation)).
  // (An input without channels gives an output without channels, as in the forward.)
  bool fits = input.size(0) == grad_output.size(0) && input.size(1) == in_channels &&
              (grad_output.size(1) == out_channels || (in_channels == 0 && grad_output.size(1) == 0));
  for (std::size_t d = 0; d < k && fits; ++d) {
    const std::int64_t in = input.size(2 + d), out = grad_output.size(2 + d);
    const std::int64_t dilated_kernel = add_or_fail(multiply_or_fail(dilation[d], weight_sizes[2 + d] - 1, op), 1, op);
    const std::int64_t both_pads = multiply_or_fail(2, padding[d], op);
    if (!transposed) {
      const std::int64_t padded = add_or_fail(in, both_pads, op);
      fits = padded >= dilated_kernel && out == (padded - dilated_kernel) / stride[d] + 1;
    } else {
      const std::int64_t natural =
          add_or_fail(multiply_or_fail(in - 1, stride[d], op), dilated_kernel - both_pads, op);
      fits = out >= natural && out - natural < std::max(stride[d], dilation[d]);
    }
  }
  check(fits, op, ": grad_output ", shape_text(grad_output.sizes()), " is not the output of the ",
        transposed ? "transposed " : "", "convolution of input ", shape_text(input.sizes()), " with a weight of shape ",
        shape_text(weight_sizes), ", stride=", shape_text(stride), ", padding=", shape_text(padding), ", dilation=",
        shape_text(dilation), ", groups=", groups);

  Tensor grad_weight = zeros(weight_sizes, input.dtype());
  if (input.numel() == 0 || grad_output.numel() == 0) return grad_weight;  // nothing to correlate
  const Tensor input5 = kernel::contiguous_as(as_5d(input), input.dtype());
  const Tensor grad5 = kernel::contiguous_as(as_5d(grad_output), input.dtype());
  Shape kernel_sizes(weight_sizes.begin() + 2, weight_sizes.end());
  while (kernel_sizes.size() < 3) kernel_sizes.insert(kernel_sizes.begin(), 1);
  // The forward's window: on the input of a direct convolution, on the output of a transposed one.
  const Tensor& image = transposed ? grad5 : input5;
  const Tensor& positions = transposed ? input5 : grad5;
  const Window3d window = window_3d(image.size(1) / groups, image, positions,
                                    {kernel_sizes[0], kernel_sizes[1], kernel_sizes[2]}, stride, padding, dilation);
  const Tensor columns = im2col_buffer(op, window, input.dtype());
  kernel::dispatch(input.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>)
      convolution_weight_grad_kernel<T>(transposed ? input5 : grad5, image, groups, window, columns, grad_weight);
  });
  return with_rounding_noise(grad_weight);
}

// ------------------------------------------------------------- batch norm ---

std::tuple<Tensor, Tensor, Tensor> native_batch_norm_backward(
    const Tensor& grad_out, const Tensor& input, const OptionalTensor& weight_arg, const OptionalTensor& running_mean,
    const OptionalTensor& running_var, const OptionalTensor& save_mean, const OptionalTensor& save_invstd,
    bool train, double eps, const std::array<bool, 3>& output_mask) {
  const char* op = "native_batch_norm_backward";
  check(grad_out.defined() && input.defined(), op, ": grad_out and input must be defined");
  const OptionalTensor weight = weight_arg && weight_arg->defined() ? weight_arg : std::nullopt;
  if (kernel::is_storage_format(input) || kernel::is_storage_format(grad_out)) {
    // In float32 and rounded once, as ATen's CPU kernel computes float16 and bfloat16.
    auto [grad_input, grad_weight, grad_bias] = native_batch_norm_backward(
        kernel::to_opmath(grad_out), kernel::to_opmath(input), kernel::to_opmath(weight),
        kernel::to_opmath(running_mean), kernel::to_opmath(running_var), kernel::to_opmath(save_mean),
        kernel::to_opmath(save_invstd), train, eps, output_mask);
    const DType param_dtype = weight ? weight->dtype() : input.dtype();
    return {kernel::rounded_to(grad_input, input.dtype()), kernel::rounded_to(grad_weight, param_dtype),
            kernel::rounded_to(grad_bias, param_dtype)};
  }
  check(input.dim() >= 2, op, ": expected input with a channel dim (at least 2 dims), got input of shape ",
        shape_text(input.sizes()));
  check(grad_out.sizes() == input.sizes(), op, ": grad_out ", shape_text(grad_out.sizes()),
        " does not have the shape of input ", shape_text(input.sizes()));
  check(grad_out.dtype() == input.dtype(), op, ": grad_out (", dtype_name(grad_out.dtype()), ") and input (",
        dtype_name(input.dtype()), ") must have the same dtype");
  const std::int64_t channels = input.size(1);
  // Each per-channel tensor: defined where needed, with one value per channel.
  const auto check_per_channel = [&](const OptionalTensor& t, const char* name, bool needed) {
    check(!needed || (t && t->defined()), op, ": ", name, " must be defined ", train ? "in training" : "in eval mode");
    check(!t || !t->defined() || t->numel() == channels, op, ": ", name, " of shape ",
          shape_text(t && t->defined() ? t->sizes() : Shape{}), " does not have the ", channels,
          " channels of input ", shape_text(input.sizes()));
  };
  check_per_channel(weight, "weight", false);
  check_per_channel(save_mean, "save_mean", train);
  check_per_channel(save_invstd, "save_invstd", train);
  check_per_channel(running_mean, "running_mean", !train);
  check_per_channel(running_var, "running_var", !train);

  Tensor grad_input, grad_weight, grad_bias;
  kernel::dispatch_floating(input.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // The per-channel values, contiguous and in the input's dtype.
    const auto values = [&](const Tensor& t) { return kernel::contiguous_as(t, input.dtype()); };
    const Tensor w = weight ? values(*weight) : Tensor();
    const Tensor mean = values(train ? *save_mean : *running_mean);
    Tensor invstd;
    if (train) {
      invstd = values(*save_invstd);
    } else {
      // 1 / sqrt(running_var + eps) in double, rounded once, as ATen's kernel computes it.
      invstd = empty({channels}, input.dtype());
      const Tensor var = values(*running_var);
      for (std::int64_t c = 0; c < channels; ++c)
        invstd.data_ptr<T>()[c] = static_cast<T>(1.0 / std::sqrt(static_cast<double>(var.data_ptr<T>()[c]) + eps));
    }
    if (output_mask[0]) grad_input = empty(input.sizes(), input.dtype());
    if (output_mask[1]) grad_weight = empty({channels}, input.dtype());
    if (output_mask[2]) grad_bias = empty({channels}, input.dtype());
    const auto data = [](const Tensor& t) { return t.defined() ? t.data_ptr<T>() : nullptr; };
    batch_norm_backward_kernel<T>(kernel::contiguous_as(grad_out, input.dtype()),
                                  kernel::contiguous_as(input, input.dtype()), data(w), mean.data_ptr<T>(),
                                  invstd.data_ptr<T>(), train, data(grad_input), data(grad_weight), data(grad_bias));
  });
  const auto noisy = [](const Tensor& t) { return t.defined() ? with_rounding_noise(t) : t; };
  return {noisy(grad_input), noisy(grad_weight), noisy(grad_bias)};
}

// ------------------------------------------------------------- max pooling ---

Tensor max_pool_backward(const Tensor& grad_output, const Tensor& indices, const Shape& self_sizes,
                         std::int64_t spatial_dims) {
  const char* op = "max_pool_backward";
  check(grad_output.defined() && indices.defined(), op, ": grad_output and indices must be defined");
  if (kernel::is_storage_format(grad_output))  // summed in float32, rounded once
    return kernel::rounded_to(max_pool_backward(kernel::to_opmath(grad_output), indices, self_sizes, spatial_dims),
                              grad_output.dtype());
  const auto dims = static_cast<std::int64_t>(self_sizes.size());
  check(spatial_dims >= 1 && spatial_dims <= dims, op, ": self of shape ", shape_text(self_sizes), " has no ",
        spatial_dims, " spatial dims");
  const auto leading = static_cast<std::size_t>(dims - spatial_dims);
  check(grad_output.dim() == dims && std::equal(self_sizes.begin(), self_sizes.begin() + leading,
                                                grad_output.sizes().begin()),
        op, ": grad_output ", shape_text(grad_output.sizes()), " does not have the leading dims of self ",
        shape_text(self_sizes), " (", spatial_dims, " spatial dims)");
  check(indices.sizes() == grad_output.sizes(), op, ": indices ", shape_text(indices.sizes()),
        " do not have the shape of grad_output ", shape_text(grad_output.sizes()));
  check(indices.dtype() == DType::Int64, op, ": indices must be int64, got ", dtype_name(indices.dtype()));
  Tensor grad_input = empty(self_sizes, grad_output.dtype());
  const Shape plane_sizes(self_sizes.begin() + leading, self_sizes.end());
  const std::int64_t planes = numel_of(Shape(self_sizes.begin(), self_sizes.begin() + leading));
  // not computed when there are no planes: the other sizes may then be anything
  const std::int64_t plane = planes == 0 ? 0 : numel_of(plane_sizes);
  const std::int64_t outputs_per_plane = planes == 0 ? 0 : grad_output.numel() / planes;
  kernel::dispatch_floating(grad_output.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (planes == 0) return;
    const Tensor grad = kernel::contiguous_as(grad_output, grad_output.dtype());
    const Tensor index = kernel::contiguous_as(indices, DType::Int64);
    const std::int64_t bad = max_pool_backward_kernel<T>(grad.data_ptr<T>(), index.data_ptr<std::int64_t>(),
                                                         grad_input.data_ptr<T>(), planes, outputs_per_plane, plane);
    check(bad < 0, op, ": index ", bad < 0 ? 0 : index.data_ptr<std::int64_t>()[bad],
          " in indices is out of range for self's plane ", shape_text(plane_sizes), " of ", plane, " elements");
  });
  return with_rounding_noise(grad_input);
}

// ---------------------------------------------------------------- pooling ---

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& self, const IntList& kernel_size,
                                                  const IntList& stride, const IntList& padding,
                                                  const IntList& dilation, bool ceil_mode) {
  const char* op = "max_pool2d_with_indices";
  if (kernel::is_storage_format(self)) {
    const auto [values, indices] =
        max_pool2d_with_indices(kernel::to_opmath(self), kernel_size, stride, padding, dilation, ceil_mode);
    return {kernel::rounded_to(values, self.dtype()), indices};
  }
  const Pool2dParams p = pool_params(op, kernel_size, stride, padding, dilation);
  check_pool_input(op, self, /*allow_int64=*/true);
  const std::int64_t in_h = self.size(self.dim() - 2), in_w = self.size(self.dim() - 1);
  const std::int64_t out_h = pooling_output_size(op, in_h, p.kernel_h, p.pad_h, p.stride_h, p.dilation_h, ceil_mode);
  const std::int64_t out_w = pooling_output_size(op, in_w, p.kernel_w, p.pad_w, p.stride_w, p.dilation_w, ceil_mode);
  pool2d_shape_check(op, self, p, out_h, out_w);

  const Shape out_shape = pooled_shape(self, out_h, out_w);
  Tensor output = empty(out_shape, self.dtype());
  Tensor indices = empty(out_shape, DType::Int64);
  const std::int64_t planes = planes_of(self);
  kernel::dispatch(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      const Tensor input = kernel::contiguous_as(self, self.dtype());
      const T* in = input.data_ptr<T>();
      T* out = output.data_ptr<T>();
      std::int64_t* idx = indices.data_ptr<std::int64_t>();
      const T lowest =
          std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest();
      for (std::int64_t plane = 0; plane < planes; ++plane) {
        const T* image = in + plane * in_h * in_w;
        for (std::int64_t oh = 0; oh < out_h; ++oh)
          for (std::int64_t ow = 0; ow < out_w; ++ow) {
            // The window's taps, clipped to the image (padding is -inf: never the max).
            std::int64_t h0 = oh * p.stride_h - p.pad_h, w0 = ow * p.stride_w - p.pad_w;
            const std::int64_t h1 = std::min(h0 + (p.kernel_h - 1) * p.dilation_h + 1, in_h);
            const std::int64_t w1 = std::min(w0 + (p.kernel_w - 1) * p.dilation_w + 1, in_w);
            h0 = first_tap_inside(h0, p.dilation_h);
            w0 = first_tap_inside(w0, p.dilation_w);
            std::int64_t best_index = h0 * in_w + w0;
            T best = lowest;
            for (std::int64_t h = h0; h < h1; h += p.dilation_h)
              for (std::int64_t w = w0; w < w1; w += p.dilation_w) {
                const T value = image[h * in_w + w];
                // NaN propagates, as in ATen: every NaN tap takes over.
                bool take = value > best;
                if constexpr (std::is_floating_point_v<T>) take = take || std::isnan(value);
                if (take) {
                  best = value;
                  best_index = h * in_w + w;
                }
              }
            const std::int64_t o = (plane * out_h + oh) * out_w + ow;
            out[o] = best;
            idx[o] = best_index;
          }
      }
    }
  });
  return {output, indices};
}

namespace {

// int64 sums wrap around, as in ATen.
template <class T>
T wrapping_plus(T a, T b) {
  if constexpr (std::is_same_v<T, std::int64_t>) return kernel::wrapping_add(a, b);
  else return a + b;
}

// int64 divides like C++ (truncation), as ATen does; INT64_MIN / -1, a
// hardware trap in C++, wraps to INT64_MIN as in torch.
template <class T>
T truncating_divide(T sum, std::int64_t divisor) {
  if constexpr (std::is_same_v<T, std::int64_t>) return divisor == -1 ? kernel::wrapping_neg(sum) : sum / divisor;
  else return sum / static_cast<T>(divisor);
}

}  // namespace

Tensor avg_pool2d(const Tensor& self, const IntList& kernel_size, const IntList& stride, const IntList& padding,
                  bool ceil_mode, bool count_include_pad, std::optional<std::int64_t> divisor_override) {
  const char* op = "avg_pool2d";
  if (kernel::is_storage_format(self))
    return kernel::rounded_to(avg_pool2d(kernel::to_opmath(self), kernel_size, stride, padding, ceil_mode,
                                         count_include_pad, divisor_override),
                              self.dtype());
  const Pool2dParams p = pool_params(op, kernel_size, stride, padding, {1});
  check(!divisor_override || *divisor_override != 0, op, ": divisor must be not zero");
  check_pool_input(op, self, /*allow_int64=*/true);
  const std::int64_t in_h = self.size(self.dim() - 2), in_w = self.size(self.dim() - 1);
  const std::int64_t out_h = pooling_output_size(op, in_h, p.kernel_h, p.pad_h, p.stride_h, 1, ceil_mode);
  const std::int64_t out_w = pooling_output_size(op, in_w, p.kernel_w, p.pad_w, p.stride_w, 1, ceil_mode);
  pool2d_shape_check(op, self, p, out_h, out_w);

  Tensor output = empty(pooled_shape(self, out_h, out_w), self.dtype());
  const std::int64_t planes = planes_of(self);
  kernel::dispatch(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      const Tensor input = kernel::contiguous_as(self, self.dtype());
      const T* in = input.data_ptr<T>();
      T* out = output.data_ptr<T>();
      for (std::int64_t plane = 0; plane < planes; ++plane) {
        const T* image = in + plane * in_h * in_w;
        for (std::int64_t oh = 0; oh < out_h; ++oh)
          for (std::int64_t ow = 0; ow < out_w; ++ow) {
            // The window, first clipped to the padded image (its size is the
            // count_include_pad divisor), then to the image itself.
            std::int64_t h0 = oh * p.stride_h - p.pad_h, w0 = ow * p.stride_w - p.pad_w;
            std::int64_t h1 = std::min(h0 + p.kernel_h, in_h + p.pad_h);
            std::int64_t w1 = std::min(w0 + p.kernel_w, in_w + p.pad_w);
            const std::int64_t padded_count = (h1 - h0) * (w1 - w0);
            h0 = std::max<std::int64_t>(h0, 0);
            w0 = std::max<std::int64_t>(w0, 0);
            h1 = std::min(h1, in_h);
            w1 = std::min(w1, in_w);
            // Never empty: pad <= kernel/2 and the ceil-mode rule keep every
            // window overlapping the image.
            T sum = 0;
            for (std::int64_t h = h0; h < h1; ++h)
              for (std::int64_t w = w0; w < w1; ++w) sum = wrapping_plus(sum, image[h * in_w + w]);
            const std::int64_t divisor =
                divisor_override ? *divisor_override : count_include_pad ? padded_count : (h1 - h0) * (w1 - w0);
            out[(plane * out_h + oh) * out_w + ow] = truncating_divide(sum, divisor);
          }
      }
    }
  });
  return output;
}

Tensor adaptive_avg_pool2d(const Tensor& self, const IntList& output_size) {
  const char* op = "adaptive_avg_pool2d";
  if (kernel::is_storage_format(self))
    return kernel::rounded_to(adaptive_avg_pool2d(kernel::to_opmath(self), output_size), self.dtype());
  check(output_size.size() == 2, op, ": output_size must be 2, got ", shape_text(output_size));
  check(output_size[0] >= 0 && output_size[1] >= 0, op,
        ": elements of output_size must be greater than or equal to 0, but got ", shape_text(output_size));
  check(self.defined(), op, ": input is undefined");
  check(self.dim() == 3 || self.dim() == 4, op, ": expected a 3-d or 4-d input, but got input of size ",
        shape_text(self.sizes()));
  const std::int64_t in_h = self.size(self.dim() - 2), in_w = self.size(self.dim() - 1);
  check(in_h > 0 && in_w > 0, op, ": expected input to have non-zero size for non-batch dimensions, but got input of size ",
        shape_text(self.sizes()));
  check(self.is_floating_point(), op, ": not implemented for ", dtype_name(self.dtype()),
        " tensors (float32 and float64 are)");
  const std::int64_t out_h = output_size[0], out_w = output_size[1];
  // The cell bounds below multiply an output index by an input size.
  std::int64_t product = 0;
  check(!__builtin_mul_overflow(out_h, in_h, &product) && !__builtin_mul_overflow(out_w, in_w, &product), op,
        ": output_size ", shape_text(output_size), " times the input size ", shape_text(self.sizes()),
        " overflows int64");
  Tensor output = empty(pooled_shape(self, out_h, out_w), self.dtype());
  const std::int64_t planes = planes_of(self);
  // Output cell o of n covers input [floor(o*in/n), ceil((o+1)*in/n)), as
  // ATen's start/end_index.
  const auto start_index = [](std::int64_t o, std::int64_t out, std::int64_t in) {
    return (o / out) * in + ((o % out) * in) / out;
  };
  const auto end_index = [](std::int64_t o, std::int64_t out, std::int64_t in) {
    return 1 + ((o + 1) * in - 1) / out;
  };
  kernel::dispatch_floating(self.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Tensor input = kernel::contiguous_as(self, self.dtype());
    const T* in = input.data_ptr<T>();
    T* out = output.data_ptr<T>();
    for (std::int64_t plane = 0; plane < planes; ++plane) {
      const T* image = in + plane * in_h * in_w;
      for (std::int64_t oh = 0; oh < out_h; ++oh) {
        const std::int64_t h0 = start_index(oh, out_h, in_h), h1 = end_index(oh, out_h, in_h);
        for (std::int64_t ow = 0; ow < out_w; ++ow) {
          const std::int64_t w0 = start_index(ow, out_w, in_w), w1 = end_index(ow, out_w, in_w);
          T sum = 0;
          for (std::int64_t h = h0; h < h1; ++h)
            for (std::int64_t w = w0; w < w1; ++w) sum += image[h * in_w + w];
          out[(plane * out_h + oh) * out_w + ow] = sum / static_cast<T>(h1 - h0) / static_cast<T>(w1 - w0);
        }
      }
    }
  });
  return output;
}

// ------------------------------------------------------------- upsampling ---

Tensor upsample_nearest2d(const Tensor& self, const IntList& output_size, std::optional<double> scales_h,
                          std::optional<double> scales_w) {
  const char* op = "upsample_nearest2d";
  if (kernel::is_storage_format(self))
    return kernel::rounded_to(upsample_nearest2d(kernel::to_opmath(self), output_size, scales_h, scales_w),
                              self.dtype());
  check_upsample(op, self, output_size);
  const std::int64_t in_h = self.size(2), in_w = self.size(3), out_h = output_size[0], out_w = output_size[1];
  Tensor output = empty({self.size(0), self.size(1), out_h, out_w}, self.dtype());
  // An empty batch may come with any output size: no index table for it.
  if (output.numel() == 0) return output;
  const std::int64_t planes = self.size(0) * self.size(1);
  kernel::dispatch_floating(self.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // ATen's nearest_idx: a copy for the same size, dst/2 for twice the size,
    // else floor(dst * scale) clamped, computed in float32 for every dtype.
    const auto source_indices = [op](const char* name, std::int64_t in, std::int64_t out,
                                     std::optional<double> scale) {
      const float ratio = source_scale<float>(op, name, in, out, scale);
      std::vector<std::int64_t> index(static_cast<std::size_t>(out));
      for (std::int64_t o = 0; o < out; ++o) {
        if (out == in)
          index[o] = o;
        else if (out == 2 * in)
          index[o] = o / 2;
        else
          index[o] = last_index_at_most(static_cast<float>(o) * ratio, in);
      }
      return index;
    };
    const std::vector<std::int64_t> rows = source_indices("scales_h", in_h, out_h, scales_h);
    const std::vector<std::int64_t> cols = source_indices("scales_w", in_w, out_w, scales_w);
    const Tensor input = kernel::contiguous_as(self, self.dtype());
    const T* in = input.data_ptr<T>();
    T* out = output.data_ptr<T>();
    for (std::int64_t plane = 0; plane < planes; ++plane)
      for (std::int64_t oh = 0; oh < out_h; ++oh)
        for (std::int64_t ow = 0; ow < out_w; ++ow)
          out[(plane * out_h + oh) * out_w + ow] = in[(plane * in_h + rows[oh]) * in_w + cols[ow]];
  });
  return output;
}

Tensor upsample_bilinear2d(const Tensor& self, const IntList& output_size, bool align_corners,
                           std::optional<double> scales_h, std::optional<double> scales_w) {
  const char* op = "upsample_bilinear2d";
  if (kernel::is_storage_format(self))
    return kernel::rounded_to(
        upsample_bilinear2d(kernel::to_opmath(self), output_size, align_corners, scales_h, scales_w), self.dtype());
  check_upsample(op, self, output_size);
  const std::int64_t in_h = self.size(2), in_w = self.size(3), out_h = output_size[0], out_w = output_size[1];
  Tensor output = empty({self.size(0), self.size(1), out_h, out_w}, self.dtype());
  // An empty batch may come with any output size: no index table for it.
  if (output.numel() == 0) return output;
  const std::int64_t planes = self.size(0) * self.size(1);
  kernel::dispatch_floating(self.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // Each output index reads input indices i0 <= i1 with weights l0 + l1 = 1
    // (ATen's compute_source_index_and_lambda).
    struct Taps {
      std::int64_t i0, i1;
      T l0, l1;
    };
    const auto taps_of = [op, align_corners](const char* name, std::int64_t in, std::int64_t out,
                                             std::optional<double> scale) {
      std::vector<Taps> taps(static_cast<std::size_t>(out));
      const T ratio = upsample_scale<T>(op, name, in, out, align_corners, scale);
      for (std::int64_t o = 0; o < out; ++o) {
        if (in == out) {  // same size: a copy, whatever the scale
          taps[o] = {o, o, T(1), T(0)};
          continue;
        }
        // align_corners maps dst to dst*ratio; otherwise pixel centres line up,
        // (dst + 0.5)*ratio - 0.5, clamped at 0 on the left.
        const T real = align_corners ? ratio * static_cast<T>(o)
                                     : std::max(ratio * (static_cast<T>(o) + T(0.5)) - T(0.5), T(0));
        const std::int64_t i0 = last_index_at_most(real, in);
        const T l1 = std::min(std::max(real - static_cast<T>(i0), T(0)), T(1));
        taps[o] = {i0, i0 < in - 1 ? i0 + 1 : i0, T(1) - l1, l1};
      }
      return taps;
    };
    const std::vector<Taps> rows = taps_of("scales_h", in_h, out_h, scales_h);
    const std::vector<Taps> cols = taps_of("scales_w", in_w, out_w, scales_w);
    const Tensor input = kernel::contiguous_as(self, self.dtype());
    const T* in = input.data_ptr<T>();
    T* out = output.data_ptr<T>();
    for (std::int64_t plane = 0; plane < planes; ++plane) {
      const T* image = in + plane * in_h * in_w;
      for (std::int64_t oh = 0; oh < out_h; ++oh) {
        const Taps& r = rows[oh];
        for (std::int64_t ow = 0; ow < out_w; ++ow) {
          const Taps& c = cols[ow];
          const T top = c.l0 * image[r.i0 * in_w + c.i0] + c.l1 * image[r.i0 * in_w + c.i1];
          const T bottom = c.l0 * image[r.i1 * in_w + c.i0] + c.l1 * image[r.i1 * in_w + c.i1];
          out[(plane * out_h + oh) * out_w + ow] = r.l0 * top + r.l1 * bottom;
        }
      }
    }
  });
  return output;
}

}  // namespace refgrad
