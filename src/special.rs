//! Normal-distribution special functions accurate in the tails, built on the C math library's
//! `erfc` (statrs' normal CDF is only ~5e-11 accurate in relative terms, too coarse for log Phi
//! far in the lower tail).

use std::f64::consts::{FRAC_1_SQRT_2, PI};

// The platform's C99 `erfc` (glibc, macOS libSystem, the Windows UCRT): fdlibm's algorithm,
// accurate to an ulp or two like the pure-Rust `libm` crate's port, but on the platform's
// vectorised `exp`, which makes it ~4x faster; MC-MNP evaluates Phi ~10^9 times per cell.
#[cfg_attr(all(unix, not(target_os = "macos")), link(name = "m"))]
extern "C" {
    #[link_name = "erfc"]
    fn c_erfc(x: f64) -> f64;
}

/// Complementary error function erfc(x) = 1 - erf(x), relative accuracy ~1e-16 everywhere.
pub fn erfc(x: f64) -> f64 {
    // SAFETY: a pure C99 function of one double, defined for every input (NaN in, NaN out).
    unsafe { c_erfc(x) }
}

/// ln(2 pi) / 2.
pub const LN_SQRT_2PI: f64 = 0.918_938_533_204_672_8;

/// Standard normal density.
pub fn normal_pdf(x: f64) -> f64 {
    (-0.5 * x * x - LN_SQRT_2PI).exp()
}

/// Standard normal CDF Phi(x). Relative error about 2e-16 (1 + x^2) in the lower tail: erfc is
/// exact to an ulp or two, but it sees x/sqrt 2 rounded (1.7e-13 at x = -37).
pub fn normal_cdf(x: f64) -> f64 {
    // Beyond these points the erfc form rounds to exactly 1 (1 - Phi(8.3) = 5e-17 is below half
    // an ulp of 1) or underflows to exactly 0 (libm's erfc is 0 from 28): the early returns
    // change no bit and spare the erfc call in the importance sampler's probit products.
    if x >= NORMAL_CDF_IS_ONE {
        return 1.0;
    }
    if x <= NORMAL_CDF_IS_ZERO {
        return 0.0;
    }
    0.5 * erfc(-x * FRAC_1_SQRT_2)
}

const NORMAL_CDF_IS_ONE: f64 = 8.3;
const NORMAL_CDF_IS_ZERO: f64 = -40.0;

/// Phi at every point of `x`, into `out` (same length): the throughput form of [`normal_cdf`]
/// for the importance sampler's probit products (~10^9 evaluations per cell). libm's erfc
/// cannot be vectorised from stable Rust (SIMD types in FFI are unstable, and no maintained
/// crate offers a vector erfc on stable), so this is a branch-free evaluation that the compiler
/// vectorises, with AVX2 and AVX-512 versions picked at run time. Its only fused multiply-adds
/// are explicit `mul_add`s (exactly rounded with or without FMA hardware), so every version
/// gives the same bits (tested). Accuracy: relative error below 2e-15 wherever Phi(x) is a
/// normal number, i.e. x > -37.5 (tested against 40-digit values; exp(-x^2/2) is formed
/// without rounding x^2, so unlike [`normal_cdf`] the error does not grow with x^2); below
/// that it goes to 0 through the subnormals. NaN gives NaN.
pub fn normal_cdf_slice(x: &[f64], out: &mut [f64]) {
    assert_eq!(x.len(), out.len(), "normal_cdf_slice: input and output lengths differ");
    normal_cdf_slice_dispatch(x, out);
}

#[multiversion::multiversion(targets("x86_64+avx512f+avx512dq", "x86_64+avx2+fma"))]
fn normal_cdf_slice_dispatch(x: &[f64], out: &mut [f64]) {
    let mut xs = x.chunks_exact(PHI_BLOCK);
    let mut os = out.chunks_exact_mut(PHI_BLOCK);
    for (xb, ob) in (&mut xs).zip(&mut os) {
        normal_cdf_block::<PHI_BLOCK>(xb.try_into().expect("a full block"), ob.try_into().expect("a full block"));
    }
    // The rest in blocks of 8, the last one padded.
    for (xr, or) in xs.remainder().chunks(8).zip(os.into_remainder().chunks_mut(8)) {
        let (mut xb, mut ob) = ([0.0; 8], [0.0; 8]);
        xb[..xr.len()].copy_from_slice(xr);
        normal_cdf_block(&xb, &mut ob);
        or.copy_from_slice(&ob[..xr.len()]);
    }
}

/// e^z at every point of `z`, in place: the throughput form of `f64::exp` for kernel matrices
/// built thousands of times (the VB-MNP importance sampler). Branch-free and vectorised like
/// [`normal_cdf_slice`]; within 2 ulp of libm's exp down to the subnormals (tested), the same
/// bits on every CPU.
pub fn exp_slice(z: &mut [f64]) {
    exp_slice_dispatch(z);
}

#[multiversion::multiversion(targets("x86_64+avx512f+avx512dq", "x86_64+avx2+fma"))]
fn exp_slice_dispatch(z: &mut [f64]) {
    let mut blocks = z.chunks_exact_mut(PHI_BLOCK);
    for b in &mut blocks {
        exp_block::<PHI_BLOCK>(b.try_into().expect("a full block"));
    }
    for rest in blocks.into_remainder().chunks_mut(8) {
        let mut b = [0.0; 8];
        b[..rest.len()].copy_from_slice(rest);
        exp_block(&mut b);
        rest.copy_from_slice(&b[..rest.len()]);
    }
}

/// Points per block: each step of the series runs over the whole block, so the compiler has
/// several independent vectors in flight to hide the latency of the recurrences.
const PHI_BLOCK: usize = 32;

/// Phi(x) = erfc(-x/sqrt 2)/2 with erfc(a) = exp(-a^2) g(y) / (1 + 2a) for a = |x|/sqrt 2 and
/// g(y) = (1 + 2a) erfcx(a), y = (a - 3.75)/(a + 3.75), a Chebyshev series in y on [-1, 1)
/// (Schonfelder 1978's form; 25 terms, truncation error 5e-18; scripts/erfcx_chebyshev.py).
/// g is smooth, so the rounding of a costs only ulps there; exp(-a^2) = exp(-x^2/2) is formed
/// from x itself without rounding x^2 (up to 2e-13 relative at x = -37): |x| = hi + lo with hi
/// on 26 bits, so hi^2/2 is exact and x^2/2 = hi^2/2 + e, e = lo (|x| + hi)/2 < 5e-5. The fused
/// multiply-adds are exact-rounded with or without hardware FMA, so every version of the
/// vectorised loop gives these bits. Each step is a loop over the block.
#[inline(always)]
fn normal_cdf_block<const N: usize>(x: &[f64; N], out: &mut [f64; N]) {
    // |x| <= 42.5 keeps a <= 30, where erfc(a) < 1e-392 is 0 in floating point anyway.
    let ax: [f64; N] = std::array::from_fn(|i| x[i].abs().min(42.5));
    let a: [f64; N] = std::array::from_fn(|i| ax[i] * FRAC_1_SQRT_2);
    let y: [f64; N] = std::array::from_fn(|i| (a[i] - ERFCX_K) / (a[i] + ERFCX_K));
    let (mut b1, mut b2) = ([0.0; N], [0.0; N]);
    for &c in ERFCX_CHEB[1..].iter().rev() {
        for i in 0..N {
            let b0 = (2.0 * y[i]).mul_add(b1[i], c - b2[i]);
            b2[i] = b1[i];
            b1[i] = b0;
        }
    }
    let mut e = [0.0; N];
    let mut hi = [0.0; N];
    for i in 0..N {
        hi[i] = f64::from_bits(ax[i].to_bits() & 0xFFFF_FFFF_F800_0000);
        e[i] = -0.5 * (hi[i] * hi[i]);
    }
    exp_block(&mut e);
    for i in 0..N {
        let g = y[i].mul_add(b1[i], ERFCX_CHEB[0] - b2[i]);
        let d = 0.5 * (ax[i] - hi[i]) * (ax[i] + hi[i]);
        let exp_neg_d = 1.0 - d * (1.0 - 0.5 * d * (1.0 - d / 3.0));
        let half_erfc = 0.5 * e[i] * exp_neg_d * g / (1.0 + 2.0 * a[i]);
        out[i] = if x[i] < 0.0 {
            half_erfc
        } else if x[i] >= 0.0 {
            1.0 - half_erfc
        } else {
            f64::NAN
        };
    }
}

/// One point through the block code as compiled for the baseline target: the reference for
/// the bits of the run-time-selected vector versions.
#[cfg(test)]
fn normal_cdf_branch_free(x: f64) -> f64 {
    let (mut xb, mut ob) = ([0.0; 1], [0.0; 1]);
    xb[0] = x;
    normal_cdf_block(&xb, &mut ob);
    ob[0]
}

/// e^z in place, to about 1 ulp (0 below -746, +inf above ln(f64::MAX)), branch-free: z = k ln 2 + r
/// with |r| <= ln(2)/2 (Cody-Waite: k ln2_hi is exact), e^r by its Taylor series to degree 13
/// (remainder < 4e-18), and 2^k in two factors so that subnormal results come out right.
#[inline(always)]
fn exp_block<const N: usize>(z: &mut [f64; N]) {
    const LOG2E: f64 = std::f64::consts::LOG2_E;
    const LN2_HI: f64 = 0.6931471803691238; // ln 2 with its low 21 bits zero
    const LN2_LO: f64 = 1.9082149292705877e-10;
    // Adding 1.5 * 2^52 rounds z log2(e) to an integer k held in the low bits of the sum.
    const SHIFTER: f64 = 6755399441055744.0;
    const LN_MAX: f64 = 709.782712893384; // ln(f64::MAX)
    const INV_FACT: [f64; 14] = [
        1.0,
        1.0,
        0.5,
        0.16666666666666666,
        0.041666666666666664,
        0.008333333333333333,
        0.001388888888888889,
        0.0001984126984126984,
        2.48015873015873e-05,
        2.7557319223985893e-06,
        2.755731922398589e-07,
        2.505210838544172e-08,
        2.08767569878681e-09,
        1.6059043836821613e-10,
    ];
    let mut t = [0.0; N];
    let mut r = [0.0; N];
    for i in 0..N {
        let zi = z[i].clamp(-746.0, 710.0);
        t[i] = zi * LOG2E + SHIFTER;
        let k = t[i] - SHIFTER;
        r[i] = (zi - k * LN2_HI) - k * LN2_LO;
    }
    let mut p = [INV_FACT[13]; N];
    for &c in INV_FACT[..13].iter().rev() {
        for i in 0..N {
            p[i] = p[i].mul_add(r[i], c);
        }
    }
    let scale = |k: i64| f64::from_bits(((k + 1023) as u64) << 52);
    for i in 0..N {
        let ki = (t[i].to_bits() as i64).wrapping_sub(SHIFTER.to_bits() as i64);
        let (k1, k2) = (ki >> 1, ki - (ki >> 1));
        z[i] = if z[i] > LN_MAX { f64::INFINITY } else { p[i] * scale(k1) * scale(k2) };
    }
}

const ERFCX_K: f64 = 3.75;
const ERFCX_CHEB: [f64; 25] = [
    1.1775789345674017,
    -0.004590054580646478,
    -0.08424913336651792,
    0.05920993999819189,
    -0.026658668435305753,
    0.009074997670705265,
    -0.002413163540417608,
    0.0004907758365258086,
    -6.916973302501207e-05,
    4.13902798607301e-06,
    7.74038306619849e-07,
    -2.1886401049234397e-07,
    1.076499946567091e-08,
    4.521959811218287e-09,
    -7.754400208831351e-10,
    -6.318088340886684e-11,
    2.86879501093067e-11,
    1.9455868545777347e-13,
    -9.65469674843344e-13,
    3.25254814814874e-14,
    3.3478119482868056e-14,
    -1.864562880419313e-15,
    -1.2507950530688648e-15,
    7.418235256624044e-17,
    5.068148904796111e-17,
];

/// ln Phi at every point of `x`, into `out` (same length): the throughput form of
/// [`log_normal_cdf`] for quadrature rules evaluated millions of times. The tail probability
/// Phi(-|x|) comes from [`normal_cdf_slice`] (2e-15 relative), then ln_1p(-p) for x > 0 and
/// ln p for x <= 0; where p is not a normal number (x < -37.5) the scalar form takes over.
/// Absolute error about 2e-15 + 2e-15 |ln Phi(x)|.
pub fn log_normal_cdf_slice(x: &[f64], out: &mut [f64]) {
    assert_eq!(x.len(), out.len(), "log_normal_cdf_slice: input and output lengths differ");
    for (xc, oc) in x.chunks(64).zip(out.chunks_mut(64)) {
        let mut tail = [0.0; 64];
        for (t, v) in tail.iter_mut().zip(xc) {
            *t = -v.abs();
        }
        normal_cdf_slice(&tail[..xc.len()], oc);
    }
    for (o, &v) in out.iter_mut().zip(x) {
        *o = if v > 0.0 {
            (-*o).ln_1p()
        } else if o.is_normal() {
            o.ln()
        } else {
            log_normal_cdf(v)
        };
    }
}

/// ln Phi(x), accurate for every finite x (no underflow to -inf before x ~ -1e154).
pub fn log_normal_cdf(x: f64) -> f64 {
    if x > 0.0 {
        // Phi(x) = 1 - Phi(-x) with Phi(-x) small: ln_1p keeps the digits.
        (-0.5 * erfc(x * FRAC_1_SQRT_2)).ln_1p()
    } else if x > -5.0 {
        normal_cdf(x).ln()
    } else {
        // Phi(x) = erfcx(z) exp(-z^2) / 2 with z = -x / sqrt 2.
        let z = -x * FRAC_1_SQRT_2;
        erfcx(z).ln() - z * z - std::f64::consts::LN_2
    }
}

/// Scaled complementary error function erfcx(x) = exp(x^2) erfc(x).
pub fn erfcx(x: f64) -> f64 {
    if x < 0.0 {
        // erfc(-x) = 2 - erfc(x); overflows to +inf only when exp(x^2) does.
        return 2.0 * (x * x).exp() - erfcx(-x);
    }
    if x < 4.0 {
        // exp(x^2) <= e^16: the product loses no more than a few ulps.
        return (x * x).exp() * erfc(x);
    }
    // Continued fraction erfc(x) = exp(-x^2)/sqrt(pi) * 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + ...)))),
    // evaluated backwards; 60 terms are far more than enough for x >= 4.
    let mut tail = x;
    for k in (1..=60).rev() {
        tail = x + (k as f64 / 2.0) / tail;
    }
    1.0 / (tail * PI.sqrt())
}

/// d/dx ln Phi(x) = phi(x) / Phi(x) (the inverse Mills ratio of -x), stable in both tails.
pub fn d_log_normal_cdf(x: f64) -> f64 {
    if x > -5.0 {
        normal_pdf(x) / normal_cdf(x)
    } else {
        // phi(x)/Phi(x) = sqrt(2/pi) / erfcx(-x/sqrt 2).
        (2.0 / PI).sqrt() / erfcx(-x * FRAC_1_SQRT_2)
    }
}

/// -d^2/dx^2 ln Phi(x) = r (x + r), r = phi(x) / Phi(x): the curvature W of the probit
/// log-likelihood (GPML eq. 3.16 at x = t f), in (0, 1) for every finite x. In the lower tail
/// x + r ~ -1/x cancels catastrophically (at x = -1e4 half the digits are lost and W can round
/// to >= 1), so for x < -5 every factor comes from the Mills-ratio continued fraction without
/// a subtraction; W then stays below 1 in floating point up to |x| ~ 1e7 (beyond, 1 - W < 1e-14
/// rounds away). For x > 38 W underflows to 0.
pub fn neg_d2_log_normal_cdf(x: f64) -> f64 {
    // The limits at +-inf (the forms below give inf * 0 there).
    if x.is_infinite() {
        return if x > 0.0 { 0.0 } else { 1.0 };
    }
    if x > -5.0 {
        let r = d_log_normal_cdf(x);
        r * (x + r)
    } else {
        let t = MillsTail::new(-x);
        t.r * t.q
    }
}

/// ln Phi(x), r = phi(x) / Phi(x) and W = r (x + r) together, the three an EP moment match
/// needs per factor: the same bits as `log_normal_cdf`, `d_log_normal_cdf` and
/// `neg_d2_log_normal_cdf`, with Phi(x) and phi(x) evaluated once where those evaluate them up
/// to three and two times (x > -5; the lower tail calls the three).
pub fn log_normal_cdf_and_derivatives(x: f64) -> (f64, f64, f64) {
    if x > -5.0 {
        let cdf = normal_cdf(x);
        let log = if x > 0.0 { (-0.5 * erfc(x * FRAC_1_SQRT_2)).ln_1p() } else { cdf.ln() };
        let r = normal_pdf(x) / cdf;
        (log, r, r * (x + r))
    } else {
        (log_normal_cdf(x), d_log_normal_cdf(x), neg_d2_log_normal_cdf(x))
    }
}

/// d^3/dx^3 ln Phi(x) = W (x + r) - r (1 - W) with r and W as in `neg_d2_log_normal_cdf`;
/// within 3e-12 relative everywhere (2.5e-12 at x = -2.98, just above the branch at -3; 1e-15
/// below it). Below x = -3 it comes
/// from the continued fraction: the direct expression cancels towards the tail (~2/|x|^3),
/// 4e-11 relative at x = -5, and 60 terms of the fraction are exact from y = 3 on.
/// (W keeps its branch at -5, where its direct form is still within 1e-13: moving it would
/// change every EP and IVM number; d3 enters only the Laplace probit's hyper-parameter gradient.)
pub fn d3_log_normal_cdf(x: f64) -> f64 {
    if x.is_infinite() {
        return 0.0;
    }
    if x > -3.0 {
        let r = d_log_normal_cdf(x);
        let w = r * (x + r);
        w * (x + r) - r * (1.0 - w)
    } else {
        let t = MillsTail::new(-x);
        t.r * t.q * t.q * t.s * (t.u - t.s)
    }
}

/// The first tails of the continued fraction for the Mills ratio Phi(-y)/phi(y) (y >= 5):
///   Phi(-y)/phi(y) = 1/D_0,  D_k = y + (k + 1)/D_{k+1},
/// with q = 1/D_1, s = 2/D_2, u = 3/D_3. Then r = phi/Phi at x = -y is D_0 = y + q, so
/// x + r = q, W = r q, 1 - W = q (s - q) and 2 q - s = q s (u - s): no differences of nearly
/// equal numbers. 60 terms give full precision for y >= 3 (checked against mpmath).
struct MillsTail {
    r: f64,
    q: f64,
    s: f64,
    u: f64,
}

impl MillsTail {
    fn new(y: f64) -> MillsTail {
        debug_assert!(y >= 3.0);
        let mut d = y;
        let (mut d1, mut d2, mut d3) = (y, y, y);
        for k in (1..=60).rev() {
            d = y + (k + 1) as f64 / d;
            match k {
                3 => d3 = d,
                2 => d2 = d,
                1 => d1 = d,
                _ => {}
            }
        }
        let q = 1.0 / d1;
        MillsTail { r: y + q, q, s: 2.0 / d2, u: 3.0 / d3 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel_err(a: f64, b: f64) -> f64 {
        ((a - b) / b).abs()
    }

    #[test]
    fn normal_cdf_shortcuts_return_exactly_what_erfc_gives() {
        // Dense grids from each threshold outwards (and the thresholds themselves): the early
        // returns must agree bit for bit with the erfc form they replace.
        let full = |x: f64| 0.5 * erfc(-x * FRAC_1_SQRT_2);
        for k in 0..2_000_000 {
            let hi = NORMAL_CDF_IS_ONE + k as f64 * 2e-5;
            assert_eq!(normal_cdf(hi).to_bits(), full(hi).to_bits(), "x = {hi}");
            let lo = NORMAL_CDF_IS_ZERO - k as f64 * 2e-5;
            assert_eq!(normal_cdf(lo).to_bits(), full(lo).to_bits(), "x = {lo}");
        }
        // Just inside, erfc is still needed: Phi differs from 0 and 1 there.
        assert!(full(8.25) < 1.0 && full(-38.0) > 0.0);
    }

    #[test]
    fn normal_cdf_slice_matches_high_precision_values_and_normal_cdf() {
        // mpmath ncdf at 40 digits.
        let oracle = [
            (-37.0, 5.7255712225245768227e-300),
            (-30.0, 4.9067139271481870595e-198),
            (-20.0, 2.7536241186062336951e-89),
            (-10.0, 7.619853024160526066e-24),
            (-5.0, 2.8665157187919391167e-7),
            (-1.5, 0.066807201268858066004),
            (-0.3, 0.38208857781104736693),
            (0.0, 0.5),
            (0.7, 0.75803634777692697138),
            (2.5, 0.99379033467422386483),
            (6.0, 0.99999999901341235496),
        ];
        let x: Vec<f64> = oracle.iter().map(|o| o.0).collect();
        let mut out = vec![0.0; x.len()];
        normal_cdf_slice(&x, &mut out);
        for (&(x, want), got) in oracle.iter().zip(&out) {
            assert!(rel_err(*got, want) < 2e-15, "Phi({x}) = {got:e}, want {want:e}");
        }
        // A dense grid over the normal range, plus the points where the pieces meet, against
        // normal_cdf within its own error (2e-16 (1 + x^2) relative below 0, an ulp above).
        let mut x: Vec<f64> = (0..2_000_001).map(|k| -37.5 + k as f64 * 47.5e-6).collect();
        x.extend([0.0, -0.0, 8.3, -8.3, 3.75 * 2f64.sqrt(), -3.75 * 2f64.sqrt(), 1e-300, -1e-300]);
        let mut out = vec![0.0; x.len()];
        normal_cdf_slice(&x, &mut out);
        for (&v, &got) in x.iter().zip(&out) {
            let want = normal_cdf(v);
            let err = if v < 0.0 { rel_err(got, want) } else { (got - want).abs() };
            assert!(err < 1e-15 + 2e-16 * v * v, "x = {v}: {got:e} vs normal_cdf {want:e}");
        }
        // The vectorised versions (picked at run time) give the bits of the scalar code.
        assert!(x.iter().zip(&out).step_by(7).all(|(&v, &got)| got.to_bits() == normal_cdf_branch_free(v).to_bits()));
        // The far tail: 0 below the subnormal range, 1 where 1 - Phi is below half an ulp; NaN stays NaN.
        let mut far = [0.0; 5];
        normal_cdf_slice(&[-40.0, -1e6, 9.0, 1e6, f64::NAN], &mut far);
        assert_eq!(far[..4], [0.0, 0.0, 1.0, 1.0]);
        assert!(far[4].is_nan());
    }

    #[test]
    fn exp_block_is_within_2_ulp_of_libm_down_to_the_subnormals() {
        let exp_one = |z: f64| {
            let mut b = [z; 1];
            exp_block(&mut b);
            b[0]
        };
        for k in 0..1_000_001 {
            let z = -746.0 + k as f64 * 1.4557e-3;
            let (got, want) = (exp_one(z), z.exp());
            let ok =
                if want < f64::MIN_POSITIVE { (got - want).abs() <= 2.0 * 4.9e-324 } else { got.to_bits().abs_diff(want.to_bits()) <= 2 };
            assert!(ok, "exp({z}) = {got:e}, libm {want:e}");
        }
        assert_eq!(exp_one(0.0), 1.0);
        assert_eq!(exp_one(-800.0), 0.0);
        assert_eq!(exp_one(f64::NEG_INFINITY), 0.0);
        assert_eq!(exp_one(709.9), f64::INFINITY);
        assert_eq!(exp_one(f64::INFINITY), f64::INFINITY);
        assert!(exp_one(f64::NAN).is_nan());
        assert!(exp_one(709.7).to_bits().abs_diff(709.7f64.exp().to_bits()) <= 2);
        // The run-time-selected vector versions give the same bits (odd length: a padded tail).
        let z: Vec<f64> = (0..100_001).map(|k| -745.0 + k as f64 * 0.01454).collect();
        let mut v = z.clone();
        exp_slice(&mut v);
        assert!(z.iter().zip(&v).all(|(&z, &got)| got.to_bits() == exp_one(z).to_bits()));
    }

    // Oracle values computed with mpmath at 40 digits: exp(x^2) erfc(x) and ln ncdf(x).
    #[test]
    fn erfcx_matches_high_precision_values() {
        let cases = [
            (-3.0, 16205.988853999586625),
            (-0.5, 1.9523604891825570933),
            (0.0, 1.0),
            (0.5, 0.61569034419292587487),
            (1.0, 0.42758357615580700441),
            (3.0, 0.17900115118138995042),
            (5.0, 0.11070463773306862637),
            (10.0, 0.056140992743822585858),
            (30.0, 0.018795888861416751497),
            (1000.0, 0.0005641893014533876542),
        ];
        for (x, want) in cases {
            assert!(rel_err(erfcx(x), want) < 1e-13, "erfcx({x}) = {} want {want}", erfcx(x));
        }
    }

    #[test]
    fn log_normal_cdf_matches_high_precision_values() {
        let cases = [
            (-40.0, -804.60844201375378817),
            (-20.0, -203.91715537109726394),
            (-8.0, -35.013437159914549896),
            (-5.0, -15.064998393988725736),
            (-1.0, -1.8410216450092635058),
            (0.0, -std::f64::consts::LN_2),
            (1.0, -0.17275377902344988953),
            (5.0, -2.8665161296376359338e-7),
            (8.0, -6.2209605742717860585e-16),
        ];
        for (x, want) in cases {
            assert!(rel_err(log_normal_cdf(x), want) < 1e-13, "log Phi({x}) = {} want {want}", log_normal_cdf(x));
        }
    }

    #[test]
    fn the_combined_log_normal_cdf_and_derivatives_are_the_separate_functions_bit_for_bit() {
        // Both sides of each branch point (0, -5), the tails and a dense grid between.
        let mut xs: Vec<f64> = (0..20_001).map(|i| -60.0 + i as f64 * 0.0049).collect();
        for b in [0.0f64, -5.0] {
            xs.extend([b, b.next_up(), b.next_down(), b + 1e-9, b - 1e-9]);
        }
        xs.extend([-1e4, -40.0, 8.3, 30.0, 40.0, 1e3]);
        for x in xs {
            let (log, r, w) = log_normal_cdf_and_derivatives(x);
            assert_eq!(log.to_bits(), log_normal_cdf(x).to_bits(), "ln Phi at {x}");
            assert_eq!(r.to_bits(), d_log_normal_cdf(x).to_bits(), "r at {x}");
            assert_eq!(w.to_bits(), neg_d2_log_normal_cdf(x).to_bits(), "W at {x}");
        }
    }

    #[test]
    fn d_log_normal_cdf_is_the_derivative() {
        for &x in &[-30.0, -6.0, -4.9, -1.0, 0.0, 2.0, 7.0] {
            let h = 1e-5 * (1.0 + f64::abs(x));
            let fd = (log_normal_cdf(x + h) - log_normal_cdf(x - h)) / (2.0 * h);
            assert!(rel_err(d_log_normal_cdf(x), fd) < 1e-6, "x = {x}");
        }
    }

    // Oracle values from mpmath (50 digits, numerical differentiation of ln ncdf): W = -(ln Phi)''
    // and the third derivative at x = -30, -5 .. -2.5, 0, 5.
    #[test]
    fn probit_curvature_matches_high_precision_values_and_stays_in_the_unit_interval() {
        let cases = [
            (-30.0, 0.998896228488109909, 7.3099930157844384667e-5),
            (-5.0, 0.96730356538288777465, 0.010825764506356699657),
            (-4.999, 0.96729273707396008587, 0.010830853851943088477),
            (-4.5, 0.96118590071522446586, 0.013795416560255427481),
            (-4.0, 0.95332716160257736883, 0.017856339307658425968),
            (-3.0, 0.92944081321473188314, 0.031470672830842487947),
            (-2.5, 0.91102619857888455719, 0.042878631037025509508),
            (0.0, std::f64::consts::FRAC_2_PI, 0.21801361414499016069),
            (5.0, 7.4336019148607112465e-6, 3.5681311736767049665e-5),
        ];
        for (x, w, d3) in cases {
            // W's direct form just above -5 (its branch point) is within about 1e-13.
            assert!(rel_err(neg_d2_log_normal_cdf(x), w) < 2e-13, "W({x}) = {} want {w}", neg_d2_log_normal_cdf(x));
            // (the direct form loses up to 5e-13 just above -3, its branch point; 4e-11 at -5 before)
            assert!(rel_err(d3_log_normal_cdf(x), d3) < 1e-12, "d3({x}) = {} want {d3}", d3_log_normal_cdf(x));
        }
        // The limits at +-inf: W -> 0 and 1, d3 -> 0 from both sides (not inf * 0 = NaN).
        assert_eq!(neg_d2_log_normal_cdf(f64::INFINITY), 0.0);
        assert_eq!(neg_d2_log_normal_cdf(f64::NEG_INFINITY), 1.0);
        assert_eq!((d3_log_normal_cdf(f64::INFINITY), d3_log_normal_cdf(f64::NEG_INFINITY)), (0.0, 0.0));
        // Far tail: W = 1 - 1/x^2 + 6/x^4 + O(x^-6) (asymptotic series of the Mills ratio), which
        // the unguarded r (x + r) misses at x = -1e4 by more than its distance from 1.
        for x in [-1e2, -1e3, -1e4, -1e6] {
            let w = neg_d2_log_normal_cdf(x);
            let want = 1.0 - 1.0 / (x * x) + 6.0 / x.powi(4);
            assert!(w < 1.0 && (w - want).abs() < 1e-15 + 50.0 / x.powi(6), "W({x}) = {w:e}, 1 - W = {:e}", 1.0 - w);
            // d3 ~ -2/x^3 (positive for x < 0).
            assert!(rel_err(d3_log_normal_cdf(x), -2.0 / x.powi(3)) < 20.0 / (x * x), "d3({x}) = {:e}", d3_log_normal_cdf(x));
        }
        for x in [-1e7, -40.0, -5.000001, -4.999999, -1.0, 2.0, 8.0, 30.0] {
            let w = neg_d2_log_normal_cdf(x);
            assert!(w > 0.0 && w < 1.0, "W({x}) = {w}");
        }
    }

    #[test]
    fn log_normal_cdf_slice_matches_the_scalar_form_in_both_tails() {
        // Both sides of 0, the switch to the scalar form near -37.5, and beyond.
        let x: Vec<f64> = (0..2001).map(|i| -60.0 + 0.04 * i as f64).chain([-1e3, -37.6, -37.4, -5.0, 0.0, 8.3, 40.0]).collect();
        let mut got = vec![0.0; x.len()];
        log_normal_cdf_slice(&x, &mut got);
        for (&v, &g) in x.iter().zip(&got) {
            let want = log_normal_cdf(v);
            assert!((g - want).abs() <= 4e-15 * (1.0 + want.abs()), "x = {v}: {g:e} vs {want:e}");
        }
        // In the upper tail ln Phi(x) ~ -Phi(-x) is tiny: the error is relative there too.
        let x = [1.0, 3.0, 7.0, 8.0];
        let mut out = [0.0; 4];
        log_normal_cdf_slice(&x, &mut out);
        for (&v, &g) in x.iter().zip(&out) {
            assert!(rel_err(g, log_normal_cdf(v)) < 1e-13, "x = {v}: {g:e} vs {:e}", log_normal_cdf(v));
        }
    }

    #[test]
    fn probit_curvature_is_the_finite_difference_second_derivative() {
        for x in [-30.0, -5.0, -4.0, 0.0, 5.0] {
            // Second difference of ln Phi (rounding error ~ eps |ln Phi| / h^2) and first
            // difference of the tail-accurate d ln Phi (~ eps r / h).
            let h = 1e-3;
            let fd2 = -(log_normal_cdf(x + h) - 2.0 * log_normal_cdf(x) + log_normal_cdf(x - h)) / (h * h);
            assert!(rel_err(neg_d2_log_normal_cdf(x), fd2) < 1e-5, "x = {x}: {} vs {fd2}", neg_d2_log_normal_cdf(x));
            let h = 1e-5 * (1.0 + x.abs());
            let fd1 = -(d_log_normal_cdf(x + h) - d_log_normal_cdf(x - h)) / (2.0 * h);
            assert!(rel_err(neg_d2_log_normal_cdf(x), fd1) < 1e-7, "x = {x}: {} vs {fd1}", neg_d2_log_normal_cdf(x));
            let fd3 = -(neg_d2_log_normal_cdf(x + h) - neg_d2_log_normal_cdf(x - h)) / (2.0 * h);
            assert!((d3_log_normal_cdf(x) - fd3).abs() < 1e-7 * (1e-3 + fd3.abs()), "x = {x}: {} vs {fd3}", d3_log_normal_cdf(x));
        }
    }
}
