//! One site component of the factorised multi-way IVM (Seeger, Lawrence & Herbrich §4.1,
//! eq. 7; notes §5.2): the cavity of u_{j,c} in class c's representation, the Gaussian site
//! that matches the tilted marginal, and the selection score of its inclusion.

/// The cavity N(h, a) of u_{j,c}: the marginal of class c's representation with j's site
/// component (pi, b) divided out (the marginal itself when j is not active in class c).
/// `None` when the division leaves no positive variance (1 - pi a <= 0, impossible in exact
/// arithmetic since a < 1 / pi for an active point).
pub(crate) fn cavity(h: f64, a: f64, site: Option<(f64, f64)>) -> Option<(f64, f64)> {
    let Some((pi, b)) = site else { return Some((h, a)) };
    let keep = 1.0 - pi * a;
    if !(keep > 0.0) {
        return None;
    }
    let a_cav = a / keep;
    Some((h + a_cav * (pi * h - b), a_cav))
}

/// Eq. 7: the site (pi, b) whose product with the cavity N(h, a) has the tilted marginal's
/// mean h_t and, when that variance a_t is below a, its variance:
///     pi = (1/a_t - 1/a)_+,   b = (h_t - h) / a + pi h_t.
/// The clipping (x)_+ keeps pi >= 0 when the crude product rule reports a tilted variance above
/// the cavity's (a log-concave likelihood never does in exact arithmetic, notes §5.4); then the
/// site only shifts the mean, and the caller skips it (pi^{-1/2} enters the representation).
pub(crate) fn eq7_site(h: f64, a: f64, h_t: f64, a_t: f64) -> (f64, f64) {
    let pi = (1.0 / a_t - 1.0 / a).max(0.0);
    (pi, (h_t - h) / a + pi * h_t)
}

/// The selection score of including the site (pi, b) into class c (eq. 5 per component):
///     Delta = -KL[Q'(u_{j,c}) || Q(u_{j,c})] = -(log m + 1/m + (h' - h)^2 / a - 1) / 2,
/// m = 1 + a pi, with h' = h_t the new marginal mean. Written with log1p(x) - x / (1 + x),
/// x = a pi, so small gains keep their digits. Delta <= 0; the LOWEST score is included (the
/// paper's printed argmax is a typo, notes P1).
pub(crate) fn delta_score(h: f64, a: f64, h_t: f64, pi: f64) -> f64 {
    let x = a * pi;
    let shift = h_t - h;
    -0.5 * (x.ln_1p() - x / (1.0 + x) + shift * shift / a)
}
