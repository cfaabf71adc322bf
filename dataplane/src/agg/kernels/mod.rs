//! Reduction kernels (sum, max, min over f32, f16, bf16, i32) with runtime CPU-feature dispatch.
