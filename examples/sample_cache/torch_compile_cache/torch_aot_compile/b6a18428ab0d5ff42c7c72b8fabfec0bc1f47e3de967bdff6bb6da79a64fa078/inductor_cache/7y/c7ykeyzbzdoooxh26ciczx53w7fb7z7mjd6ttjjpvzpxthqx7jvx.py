r"""
Compile-time auto-tuning block: 

import torch
from math import inf, nan
from torch._dynamo.testing import rand_strided
from torch._dynamo.utils import preserve_rng_state
from torch._inductor.select_algorithm import AlgorithmSelectorCache
from torch._inductor.async_compile import AsyncCompile

async_compile = AsyncCompile()
generate_example_value = AlgorithmSelectorCache.generate_example_value
empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda
empty_strided_xpu = torch._C._dynamo.guards._empty_strided_xpu

async_compile.wait(globals())
del async_compile
"""
# AOT ID: ['0_inference']
from ctypes import c_void_p, c_long, c_int
import torch
import math
import random
import os
import tempfile
from math import inf, nan
from cmath import nanj
from torch._inductor.hooks import run_intermediate_hooks
from torch._inductor.utils import maybe_profile
from torch._inductor.codegen.memory_planning import _align as align
from torch import device, empty_strided
from torch._inductor.async_compile import AsyncCompile
from torch._inductor.select_algorithm import extern_kernels

aten = torch.ops.aten
inductor_ops = torch.ops.inductor
_quantized = torch.ops._quantized
assert_size_stride = torch._C._dynamo.guards.assert_size_stride
assert_alignment = torch._C._dynamo.guards.assert_alignment
empty_strided_cpu = torch._C._dynamo.guards._empty_strided_cpu
empty_strided_cpu_pinned = torch._C._dynamo.guards._empty_strided_cpu_pinned
empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda
empty_strided_xpu = torch._C._dynamo.guards._empty_strided_xpu
empty_strided_mtia = torch._C._dynamo.guards._empty_strided_mtia
reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor
alloc_from_pool = torch.ops.inductor._alloc_from_pool
async_compile = AsyncCompile()
empty_strided_p2p = torch._C._distributed_c10d._SymmetricMemory.empty_strided_p2p


cpp_fused__to_copy_add_embedding_mean_mul_onednn_mm_pow_rsqrt_0 = async_compile.cpp_pybinding(['const int32_t*', 'const at::BFloat16*', 'const at::BFloat16*', 'at::BFloat16*', 'float*', 'at::BFloat16*', 'const int64_t'], r'''
#include <torch/csrc/inductor/cpp_prefix.h>
extern "C"  void  kernel(const int32_t* in_ptr0,
                       const at::BFloat16* in_ptr1,
                       const at::BFloat16* in_ptr2,
                       at::BFloat16* out_ptr0,
                       float* out_ptr1,
                       at::BFloat16* out_ptr2,
                       const int64_t ks0)
{
    std::atomic<int> inductor_cpu_integer_div_error{0};
    inductor_cpu_integer_div_error_flag = &inductor_cpu_integer_div_error;
    #pragma omp parallel
    {
        int tid = omp_get_thread_num();
        {
            #pragma omp for
            for(int64_t x0=static_cast<int64_t>(0L); x0<static_cast<int64_t>(ks0); x0+=static_cast<int64_t>(1L))
            {
                {
                    float tmp_acc0 = 0;
                    at::vec::VectorizedN<float,2> tmp_acc0_vec = at::vec::VectorizedN<float,2>(0);
                    for(int64_t x1=static_cast<int64_t>(0L); x1<static_cast<int64_t>(128L); x1+=static_cast<int64_t>(32L))
                    {
                        {
                            if(C10_LIKELY(x1 >= static_cast<int64_t>(0) && x1 < static_cast<int64_t>(128L)))
                            {
                                auto tmp0 = in_ptr0[static_cast<int64_t>(x0)];
                                auto tmp1 = c10::convert<int64_t>(tmp0);
                                auto tmp2 = tmp1;
                                auto tmp3 = c10::convert<int64_t>(tmp2);
                                TORCH_CHECK((0 <= tmp3) & (tmp3 < 512L), "index out of bounds: 0 <= tmp3 < 512L");
                                auto tmp5 = at::vec::Vectorized<at::BFloat16>::loadu(in_ptr1 + static_cast<int64_t>(x1 + 128L*tmp1), static_cast<int64_t>(32));
                                auto tmp6 = at::vec::convert<float,2,at::BFloat16,1>(tmp5);
                                auto tmp7 = tmp6 * tmp6;
                                tmp5.store(out_ptr0 + static_cast<int64_t>(x1 + 128L*x0), static_cast<int64_t>(32));
                                tmp_acc0_vec = tmp_acc0_vec + tmp7;
                            }
                        }
                    }
                    tmp_acc0 = tmp_acc0 + at::vec::vec_reduce_all<float, 2>([](at::vec::Vectorized<float>& x, at::vec::Vectorized<float>& y) { return x + y; }, tmp_acc0_vec);
                    out_ptr1[static_cast<int64_t>(x0)] = static_cast<float>(tmp_acc0);
                }
                for(int64_t x1=static_cast<int64_t>(0L); x1<static_cast<int64_t>(128L); x1+=static_cast<int64_t>(32L))
                {
                    {
                        if(C10_LIKELY(x1 >= static_cast<int64_t>(0) && x1 < static_cast<int64_t>(128L)))
                        {
                            auto tmp0 = at::vec::Vectorized<at::BFloat16>::loadu(out_ptr0 + static_cast<int64_t>(x1 + 128L*x0), static_cast<int64_t>(32));
                            auto tmp2 = out_ptr1[static_cast<int64_t>(x0)];
                            auto tmp11 = at::vec::Vectorized<at::BFloat16>::loadu(in_ptr2 + static_cast<int64_t>(x1), static_cast<int64_t>(32));
                            auto tmp1 = at::vec::convert<float,2,at::BFloat16,1>(tmp0);
                            auto tmp3 = static_cast<float>(128.0);
                            auto tmp4 = tmp2 / tmp3;
                            auto tmp5 = static_cast<float>(1e-06);
                            auto tmp6 = float(tmp4 + tmp5);
                            auto tmp7 = 1 / std::sqrt(tmp6);
                            auto tmp8 = at::vec::VectorizedN<float,2>(tmp7);
                            auto tmp9 = tmp1 * tmp8;
                            auto tmp10 = (tmp9);
                            auto tmp12 = at::vec::convert<float,2,at::BFloat16,1>(tmp11);
                            auto tmp13 = tmp10 * tmp12;
                            auto tmp14 = at::vec::convert<at::BFloat16,1,float,2>(tmp13);
                            tmp14.store(out_ptr2 + static_cast<int64_t>(x1 + 128L*x0), static_cast<int64_t>(32));
                        }
                    }
                }
            }
        }
    }
    inductor_cpu_integer_div_error_flag = nullptr;
    inductor_cpu_throw_if_integer_div_error(inductor_cpu_integer_div_error);
}
''')


cpp_fused_add_index_select_mul_split_split_with_sizes_sub_unsqueeze_view_1 = async_compile.cpp_pybinding(['const at::BFloat16*', 'const int64_t*', 'const at::BFloat16*', 'at::BFloat16*', 'at::BFloat16*', 'at::BFloat16*', 'at::BFloat16*', 'const int64_t'], r'''
#include <torch/csrc/inductor/cpp_prefix.h>
extern "C"  void  kernel(const at::BFloat16* in_ptr0,
                       const int64_t* in_ptr1,
                       const at::BFloat16* in_ptr2,
                       at::BFloat16* out_ptr0,
                       at::BFloat16* out_ptr1,
                       at::BFloat16* out_ptr2,
                       at::BFloat16* out_ptr3,
                       const int64_t ks0)
{
    std::atomic<int> inductor_cpu_integer_div_error{0};
    inductor_cpu_integer_div_error_flag = &inductor_cpu_integer_div_error;
    #pragma omp parallel
    {
        int tid = omp_get_thread_num();
        {
            #pragma omp for
            for(int64_t x0=static_cast<int64_t>(0L); x0<static_cast<int64_t>(ks0); x0+=static_cast<int64_t>(1L))
            {
                for(int64_t x1=static_cast<int64_t>(0L); x1<static_cast<int64_t>(32L); x1+=static_cast<int64_t>(32L))
                {
                    {
                        if(C10_LIKELY(x1 >= static_cast<int64_t>(0) && x1 < static_cast<int64_t>(32L)))
                        {
                            auto tmp0 = at::vec::Vectorized<at::BFloat16>::loadu(in_ptr0 + static_cast<int64_t>(128L + x1 + 256L*x0), static_cast<int64_t>(32));
                            auto tmp2 = in_ptr1[static_cast<int64_t>(x0)];
                            auto tmp14 = at::vec::Vectorized<at::BFloat16>::loadu(in_ptr0 + static_cast<int64_t>(160L + x1 + 256L*x0), static_cast<int64_t>(32));
                            auto tmp1 = at::vec::convert<float,2,at::BFloat16,1>(tmp0);
                            auto tmp3 = 256L;
                            auto tmp4 = c10::convert<int64_t>(tmp3);
                            auto tmp5 = int64_t(tmp2 + tmp4);
                            auto tmp6 = tmp2 < 0;
                            auto tmp7 = tmp6 ? tmp5 : tmp2;
                            auto tmp8 = tmp7;
                            auto tmp9 = c10::convert<int64_t>(tmp8);
                            TORCH_CHECK((0 <= tmp9) & (tmp9 < 256L), "index out of bounds: 0 <= tmp9 < 256L");
                            auto tmp11 = at::vec::Vectorized<at::BFloat16>::loadu(in_ptr2 + static_cast<int64_t>(x1 + 64L*tmp7), static_cast<int64_t>(32));
                            auto tmp12 = at::vec::convert<float,2,at::BFloat16,1>(tmp11);
                            auto tmp13 = tmp1 * tmp12;
                            auto tmp15 = at::vec::convert<float,2,at::BFloat16,1>(tmp14);
                            auto tmp16 = at::vec::Vectorized<at::BFloat16>::loadu(in_ptr2 + static_cast<int64_t>(32L + x1 + 64L*tmp7), static_cast<int64_t>(32));
                            auto tmp17 = at::vec::convert<float,2,at::BFloat16,1>(tmp16);
                            auto tmp18 = tmp15 * tmp17;
                            auto tmp19 = tmp13 - tmp18;
                            auto tmp20 = at::vec::convert<at::BFloat16,1,float,2>(tmp19);
                            auto tmp21 = tmp15 * tmp12;
                            auto tmp22 = tmp1 * tmp17;
                            auto tmp23 = tmp21 + tmp22;
                            auto tmp24 = at::vec::convert<at::BFloat16,1,float,2>(tmp23);
                            tmp20.store(out_ptr0 + static_cast<int64_t>(x1 + 64L*x0), static_cast<int64_t>(32));
                            tmp24.store(out_ptr1 + static_cast<int64_t>(x1 + 64L*x0), static_cast<int64_t>(32));
                        }
                    }
                }
            }
        }
        {
            #pragma omp for
            for(int64_t x0=static_cast<int64_t>(0L); x0<static_cast<int64_t>(ks0); x0+=static_cast<int64_t>(1L))
            {
                #pragma GCC ivdep
                for(int64_t x1=static_cast<int64_t>(0L); x1<static_cast<int64_t>(2L); x1+=static_cast<int64_t>(1L))
                {
                    for(int64_t x2=static_cast<int64_t>(0L); x2<static_cast<int64_t>(32L); x2+=static_cast<int64_t>(32L))
                    {
                        {
                            if(C10_LIKELY(x2 >= static_cast<int64_t>(0) && x2 < static_cast<int64_t>(32L)))
                            {
                                auto tmp0 = at::vec::Vectorized<at::BFloat16>::loadu(in_ptr0 + static_cast<int64_t>(x2 + 64L*x1 + 256L*x0), static_cast<int64_t>(32));
                                auto tmp2 = in_ptr1[static_cast<int64_t>(x0)];
                                auto tmp14 = at::vec::Vectorized<at::BFloat16>::loadu(in_ptr0 + static_cast<int64_t>(32L + x2 + 64L*x1 + 256L*x0), static_cast<int64_t>(32));
                                auto tmp1 = at::vec::convert<float,2,at::BFloat16,1>(tmp0);
                                auto tmp3 = 256L;
                                auto tmp4 = c10::convert<int64_t>(tmp3);
                                auto tmp5 = int64_t(tmp2 + tmp4);
                                auto tmp6 = tmp2 < 0;
                                auto tmp7 = tmp6 ? tmp5 : tmp2;
                                auto tmp8 = tmp7;
                                auto tmp9 = c10::convert<int64_t>(tmp8);
                                TORCH_CHECK((0 <= tmp9) & (tmp9 < 256L), "index out of bounds: 0 <= tmp9 < 256L");
                                auto tmp11 = at::vec::Vectorized<at::BFloat16>::loadu(in_ptr2 + static_cast<int64_t>(x2 + 64L*tmp7), static_cast<int64_t>(32));
                                auto tmp12 = at::vec::convert<float,2,at::BFloat16,1>(tmp11);
                                auto tmp13 = tmp1 * tmp12;
                                auto tmp15 = at::vec::convert<float,2,at::BFloat16,1>(tmp14);
                                auto tmp16 = at::vec::Vectorized<at::BFloat16>::loadu(in_ptr2 + static_cast<int64_t>(32L + x2 + 64L*tmp7), static_cast<int64_t>(32));
                                auto tmp17 = at::vec::convert<float,2,at::BFloat16,1>(tmp16);
                                auto tmp18 = tmp15 * tmp17;
                                auto tmp19 = tmp13 - tmp18;
                                auto tmp20 = at::vec::convert<at::BFloat16,1,float,2>(tmp19);
                                auto tmp21 = tmp15 * tmp12;
                                auto tmp22 = tmp1 * tmp17;
                                auto tmp23 = tmp21 + tmp22;
                                auto tmp24 = at::vec::convert<at::BFloat16,1,float,2>(tmp23);
                                tmp20.store(out_ptr2 + static_cast<int64_t>(x2 + 64L*x1 + 128L*x0), static_cast<int64_t>(32));
                                tmp24.store(out_ptr3 + static_cast<int64_t>(x2 + 64L*x1 + 128L*x0), static_cast<int64_t>(32));
                            }
                        }
                    }
                }
            }
        }
    }
    inductor_cpu_integer_div_error_flag = nullptr;
    inductor_cpu_throw_if_integer_div_error(inductor_cpu_integer_div_error);
}
''')


async_compile.wait(globals())
del async_compile

class Runner:
    def __init__(self, partitions):
        self.partitions = partitions

    def recursively_apply_fns(self, fns):
        new_callables = []
        for fn, c in zip(fns, self.partitions):
            new_callables.append(fn(c))
        self.partitions = new_callables

    def call(self, args):
        arg0_1, arg1_1, arg2_1, arg3_1, arg4_1, arg5_1, arg6_1 = args
        args.clear()
        s72 = arg1_1
        s80 = s72
        buf0 = empty_strided_cpu((s72, 256), (256, 1), torch.bfloat16)
        buf1 = empty_strided_cpu((s72, 128), (128, 1), torch.bfloat16)
        buf2 = empty_strided_cpu((s72, 1), (1, s72), torch.float32)
        buf3 = empty_strided_cpu((s72, 128), (128, 1), torch.bfloat16)
        cpp_fused__to_copy_add_embedding_mean_mul_onednn_mm_pow_rsqrt_0(arg0_1, arg2_1, arg3_1, buf1, buf2, buf3, s72)
        del arg0_1
        del arg2_1
        del arg3_1
        del buf2
        # Topologically Sorted Source Nodes: [to, pow_1, mean, add, rsqrt, mul, to_1, mul_1, onednn_mm], Original ATen: [aten._to_copy, aten.pow, aten.mean, aten.add, aten.rsqrt, aten.mul, _C.onednn_mm]
        torch.ops._C.onednn_mm.default(buf0, buf3, None, arg4_1)
        del arg4_1
        buf8 = empty_strided_cpu((s72, 1, 64), (64, 64, 1), torch.bfloat16)
        buf6 = reinterpret_tensor(buf8, (s72, 1, 32), (64, 64, 1), 0)  # alias
        buf7 = reinterpret_tensor(buf8, (s72, 1, 32), (64, 64, 1), 32)  # alias
        buf11 = reinterpret_tensor(buf3, (s72, 2, 64), (128, 64, 1), 0); del buf3  # reuse
        buf9 = reinterpret_tensor(buf11, (s72, 2, 32), (128, 64, 1), 0)  # alias
        buf10 = reinterpret_tensor(buf11, (s72, 2, 32), (128, 64, 1), 32)  # alias
        buf12 = empty_strided_cpu((s72, 128), (128, 1), torch.bfloat16)
        cpp_fused_add_index_select_mul_split_split_with_sizes_sub_unsqueeze_view_1(buf0, arg5_1, arg6_1, buf6, buf7, buf9, buf10, s72)
        del arg5_1
        del arg6_1
        return (buf8, reinterpret_tensor(buf0, (s72, 1, 64), (256, 64, 1), 192), buf11, reinterpret_tensor(buf12, (s72, 2, 64), (128, 64, 1), 0), buf1, )

runner = Runner(partitions=[])
call = runner.call
recursively_apply_fns = runner.recursively_apply_fns


def get_args():
    from torch._dynamo.testing import rand_strided
    arg0_1 = rand_strided((128, ), (1, ), device='cpu', dtype=torch.int32)
    arg1_1 = 128
    arg2_1 = rand_strided((512, 128), (128, 1), device='cpu', dtype=torch.bfloat16)
    arg3_1 = rand_strided((128, ), (1, ), device='cpu', dtype=torch.bfloat16)
    arg4_1 = rand_strided((), (), device='cpu', dtype=torch.int64)
    arg5_1 = rand_strided((128, ), (1, ), device='cpu', dtype=torch.int64)
    arg6_1 = rand_strided((256, 64), (64, 1), device='cpu', dtype=torch.bfloat16)
    return [arg0_1, arg1_1, arg2_1, arg3_1, arg4_1, arg5_1, arg6_1]


def benchmark_compiled_module(args, times=10, repeat=10):
    from torch._inductor.utils import print_performance
    fn = lambda: call(list(args))
    return print_performance(fn, times=times, repeat=repeat, device='cpu')


if __name__ == "__main__":
    from torch._inductor.wrapper_benchmark import compiled_module_main
    args = get_args()
    compiled_module_main('None', lambda times, repeat: benchmark_compiled_module(args, times=times, repeat=repeat))
