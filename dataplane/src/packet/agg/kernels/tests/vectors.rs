//! The project's shared summation cases (`shared/cases/sum_vectors.csv`), for every kernel set.

use super::{is_nan, reduce, to_wire, FINISHES};
use crate::wire::gradient::{Dtype, Op};

/// A copy of `shared/cases/sum_vectors.csv`: one lane per row, inputs in arrival order, each lane
/// its bit pattern in hex (most significant digit first); `nan` means any NaN of the dtype.
const SUM_VECTORS: &str = r#"case,dtype,op,inputs_hex_in_arrival_order,expected_hex
"fp16 partial sums would overflow",f16,sum,78e2 78e2 f8e2 f8e2,0000
"fp16 largest finite stays finite",f16,sum,7bff 0000,7bff
"fp16 sum rounds up to infinity",f16,sum,7bff 4c00,7c00
"fp16 subnormals are not flushed",f16,sum,0001 0001,0002
"fp16 NaN propagates",f16,sum,7e00 3c00,nan
"fp16 inf plus -inf",f16,sum,7c00 fc00,nan
"bf16 rounds to nearest, not truncated",bf16,sum,3f80 3b81,3f81
"bf16 tie goes to even (even side)",bf16,sum,3f80 3b80,3f80
"bf16 tie goes to even (odd side)",bf16,sum,3f81 3b80,3f82
"bf16 signalling NaN stays NaN",bf16,sum,7f81 3f80,nan
"bf16 overflow to infinity",bf16,sum,7f7f 7f7f,7f80
"i32 wraps on overflow",i32,sum,7fffffff 00000001,80000000
"i32 wraps on underflow",i32,sum,80000000 ffffffff,7fffffff
"f32 negative zeros keep the sign",f32,sum,80000000 80000000,80000000
"f32 max with NaN is NaN",f32,max,3f800000 7fc00000 40000000,nan
"i32 min",i32,min,00000005 fffffffb 00000000,fffffffb
"bf16 max of equal values",bf16,max,c000 c000,c000
"#;

/// One row of the cases.
struct Case {
    name: String,
    dtype: Dtype,
    op: Op,
    inputs: Vec<u32>,
    /// `None` for `nan`.
    expected: Option<u32>,
}

fn parse(csv: &str) -> Vec<Case> {
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("case,dtype,op,inputs_hex_in_arrival_order,expected_hex"));
    lines
        .map(|line| {
            // The quoted name holds no quote and no further comma-separated field.
            let (name, rest) = line[1..].split_once("\",").expect("quoted case name");
            let fields: Vec<&str> = rest.split(',').collect();
            let [dtype, op, inputs, expected] = fields[..] else {
                panic!("bad row {line:?}");
            };
            let hex = |s: &str| u32::from_str_radix(s, 16).expect("hex lane");
            Case {
                name: name.to_string(),
                dtype: Dtype::from_name(dtype).expect("dtype"),
                op: Op::from_name(op).expect("op"),
                inputs: inputs.split(' ').map(hex).collect(),
                expected: (expected != "nan").then(|| hex(expected)),
            }
        })
        .collect()
}

/// Lane counts to replicate each case over: a single lane, and counts around the AVX2 (8) and
/// AVX-512 (16) vector widths, so that vector bodies and tails both see every case.
const LANE_COUNTS: [usize; 8] = [1, 3, 8, 15, 16, 17, 40, 259];

#[test]
fn every_case_on_every_kernel_set() {
    let cases = parse(SUM_VECTORS);
    assert_eq!(cases.len(), 17);
    for k in super::kernel_sets() {
        for case in &cases {
            for lanes in LANE_COUNTS {
                let inputs: Vec<Vec<u8>> = case.inputs.iter().map(|&x| to_wire(case.dtype, &vec![x; lanes])).collect();
                for finish in FINISHES {
                    let (got, _) = reduce(&k, case.op, case.dtype, &inputs, finish);
                    for (i, &lane) in got.iter().enumerate() {
                        let ok = match case.expected {
                            Some(want) => lane == want,
                            None => is_nan(case.dtype, lane),
                        };
                        assert!(
                            ok,
                            "{}: {:?} via {finish:?}, lane {i} of {lanes}: got {lane:x}, \
                             expected {}",
                            k.name(),
                            case.name,
                            case.expected.map_or("nan".into(), |x| format!("{x:x}")),
                        );
                    }
                }
            }
        }
    }
}
