// torchvision 0.28's Python declares two operators on the int_repr() of quantized tensors
// that the 0.21.0 C++ sources built here do not have: torchvision::qnms (ops/boxes.py) and
// torchvision::qroi_align (ops/roi_align.py); 0.21 registers the same computations as the
// QuantizedCPU kernels of torchvision::nms and torchvision::roi_align. This declares 0.28's
// schemas and implements each by re-wrapping the integers as the quantized tensor they came
// from and calling 0.21's own quantized kernel, so the arithmetic is torchvision's.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "ops/nms.h"
#include "ops/roi_align.h"

namespace {

// The quantized dtype whose int_repr() has this dtype.
at::ScalarType quantized_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kByte: return at::kQUInt8;
    case at::kChar: return at::kQInt8;
    case at::kInt: return at::kQInt32;
    default: TORCH_CHECK(false, "expected the int_repr() of a quantized tensor, got ",
                         t.scalar_type());
  }
}

at::Tensor requantize(const at::Tensor& ints, double scale, int64_t zero_point) {
  (void)quantized_of(ints);
  return at::_make_per_tensor_quantized_tensor(ints, scale, zero_point);
}

// 0.21's qnms kernel compares the integer values; scale 1, zero point 0 keeps them as given.
at::Tensor qnms(const at::Tensor& dets, const at::Tensor& scores, double iou_threshold) {
  return vision::ops::nms(requantize(dets, 1.0, 0), requantize(scores, 1.0, 0), iou_threshold);
}

at::Tensor qroi_align(const at::Tensor& input, const at::Tensor& rois, double input_scale,
                      int64_t input_zero_point, double rois_scale, int64_t rois_zero_point,
                      double spatial_scale, int64_t pooled_height, int64_t pooled_width,
                      int64_t sampling_ratio, bool aligned) {
  return vision::ops::roi_align(requantize(input, input_scale, input_zero_point),
                                requantize(rois, rois_scale, rois_zero_point), spatial_scale,
                                pooled_height, pooled_width, sampling_ratio, aligned)
      .int_repr();
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(torchvision, m) {
  m.def("torchvision::qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor");
  m.def("torchvision::qroi_align(Tensor input, Tensor rois, float input_scale, "
        "int input_zero_point, float rois_scale, int rois_zero_point, float spatial_scale, "
        "SymInt pooled_height, SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor");
}

TORCH_LIBRARY_IMPL(torchvision, CPU, m) {
  m.impl("torchvision::qnms", TORCH_FN(qnms));
  m.impl("torchvision::qroi_align", TORCH_FN(qroi_align));
}
