//! The optimiser against functions with known minima and line searches with known outcomes.
use super::line_search::DECREASE_TRIALS;
use super::*;

/// `minimize_lbfgs_resume` with fresh memory.
fn minimize_lbfgs_opts(
    f: &CostAndGrad<'_>,
    x0: &[f64],
    free: &[bool],
    max_iters: u64,
    tol: f64,
    opts: LbfgsOptions,
) -> Result<Minimum, FitError> {
    minimize_lbfgs_resume(f, x0, free, max_iters, tol, opts, &mut LbfgsMemory::default())
}

#[test]
fn finds_the_minimum_of_a_rosenbrock_valley_with_a_fixed_coordinate() {
    // f(a, b, c) = (1 - a)^2 + 100 (b - a^2)^2 + (c - 3)^2, with c held at 5.
    let f = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
        let (a, b, c) = (x[0], x[1], x[2]);
        let v = (1.0 - a).powi(2) + 100.0 * (b - a * a).powi(2) + (c - 3.0).powi(2);
        let g = vec![-2.0 * (1.0 - a) - 400.0 * a * (b - a * a), 200.0 * (b - a * a), 2.0 * (c - 3.0)];
        Ok((v, g))
    };
    let m = minimize_lbfgs(&f, &[-1.2, 1.0, 5.0], &[true, true, false], 500, 1e-10).unwrap();
    assert!((m.x[0] - 1.0).abs() < 1e-4 && (m.x[1] - 1.0).abs() < 1e-4, "{:?}", m);
    assert_eq!(m.x[2], 5.0);
    assert!((m.value - 4.0).abs() < 1e-6);
}

#[test]
fn a_failed_trial_point_restarts_from_the_best_point_with_shorter_steps() {
    // f(x) = (x - 10)^2, undefined beyond x = 5 (a wall like a near-singular covariance):
    // the first L-BFGS step from 0 lands at 20 and fails. Restarting from the best point with
    // shorter steps gets close to the wall instead of stopping at the start (x = 0).
    let f = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
        if x[0] > 5.0 {
            return Err(FitError::Numerical("beyond the wall".into()));
        }
        Ok(((x[0] - 10.0).powi(2), vec![2.0 * (x[0] - 10.0)]))
    };
    let m = minimize_lbfgs(&f, &[0.0], &[true], 100, 1e-10).unwrap();
    assert!(m.x[0] > 3.5 && m.x[0] <= 5.0, "{m:?}");
    assert!(m.stop_reason.contains("restart"), "{}", m.stop_reason);
    // A smooth problem never restarts, so its path is the plain L-BFGS one.
    let g = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> { Ok(((x[0] - 1.0).powi(2), vec![2.0 * (x[0] - 1.0)])) };
    let m = minimize_lbfgs(&g, &[0.0], &[true], 100, 1e-10).unwrap();
    assert!(!m.stop_reason.contains("restart") && (m.x[0] - 1.0).abs() < 1e-6, "{m:?}");
}

#[test]
fn the_unit_length_first_step_goes_one_unit_where_the_gradient_step_goes_its_length() {
    // f(x, y) = 500 ((x - 3)^2 + (y + 4)^2): gradient (-3000, 4000) at the origin, norm 5000.
    // The first trial point is x0 - g (5000 away) by default and x0 - g / |g| (1 away) under
    // UnitLength, as Fortran L-BFGS-B starts; both then reach the minimum.
    for (first, want) in [(FirstStep::Gradient, 5000.0), (FirstStep::UnitLength, 1.0)] {
        let seen = Mutex::new(Vec::new());
        let f = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
            seen.lock().unwrap().push(x.to_vec());
            let (a, b) = (x[0] - 3.0, x[1] + 4.0);
            Ok((500.0 * (a * a + b * b), vec![1000.0 * a, 1000.0 * b]))
        };
        let m = minimize_lbfgs_with(&f, &[0.0, 0.0], &[true, true], 100, 1e-12, first).unwrap();
        let seen = seen.into_inner().unwrap();
        let step = seen[1].iter().map(|v| v * v).sum::<f64>().sqrt();
        assert!((step - want).abs() < 1e-9 * want, "{first:?}: first trial step {step}, want {want}");
        // Along -g: the direction (3, -4) / 5.
        assert!((seen[1][0] * 4.0 + seen[1][1] * 3.0).abs() < 1e-6 * want, "{first:?}: {:?}", seen[1]);
        assert!((m.x[0] - 3.0).abs() < 1e-5 && (m.x[1] + 4.0).abs() < 1e-5, "{first:?}: {m:?}");
    }
}

#[test]
fn carried_curvature_pairs_make_the_next_runs_first_step_newtons() {
    // f_c(x) = 50 (x - c)^2 has curvature 100. Every pair (s, y) of a run on f_1 has
    // y = 100 s, so L-BFGS's H is exactly 1/100 and a second run, on f_-2 from x = 0 with
    // the pairs carried, takes the Newton step -g / 100 = -2: its first trial point is the
    // minimum. Without them the first trial point is x0 - g = -200.
    let cost = |c: f64| move |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> { Ok((50.0 * (x[0] - c).powi(2), vec![100.0 * (x[0] - c)])) };
    let mut memory = LbfgsMemory::default();
    let first = minimize_lbfgs_resume(&cost(1.0), &[0.0], &[true], 100, 1e-14, LbfgsOptions::default(), &mut memory).unwrap();
    assert!((first.x[0] - 1.0).abs() < 1e-6, "{first:?}");
    assert!(!memory.is_empty(), "a clean run leaves its pairs");
    for (carry, want) in [(true, -2.0), (false, -200.0)] {
        let seen = Mutex::new(Vec::new());
        let f = |x: &[f64]| {
            seen.lock().unwrap().push(x[0]);
            cost(-2.0)(x)
        };
        let mut fresh = LbfgsMemory::default();
        let m =
            minimize_lbfgs_resume(&f, &[0.0], &[true], 100, 1e-14, LbfgsOptions::default(), if carry { &mut memory } else { &mut fresh })
                .unwrap();
        let seen = seen.into_inner().unwrap();
        assert!((seen[1] - want).abs() < 1e-9 * want.abs(), "carry {carry}: first trial point {}, want {want}", seen[1]);
        assert!((m.x[0] + 2.0).abs() < 1e-6, "carry {carry}: {m:?}");
    }
}

#[test]
fn a_run_with_other_settings_does_not_inherit_the_carried_solver() {
    // The pairs of a run at one cost tolerance, or with one number of pairs, are not offered
    // to a run with another (the carried solver would bring its settings along): its first
    // trial point is then x0 - g = -200, as with no memory.
    let cost = |c: f64| move |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> { Ok((50.0 * (x[0] - c).powi(2), vec![100.0 * (x[0] - c)])) };
    let (plain, five) = (LbfgsOptions::default(), LbfgsOptions { pairs: Some(5), ..Default::default() });
    for ((tol_before, before), (tol_after, after)) in [((1e-14, plain), (1e-10, plain)), ((1e-14, five), (1e-14, plain))] {
        let mut memory = LbfgsMemory::default();
        minimize_lbfgs_resume(&cost(1.0), &[0.0], &[true], 100, tol_before, before, &mut memory).unwrap();
        assert!(!memory.is_empty());
        let seen = Mutex::new(Vec::new());
        let f = |x: &[f64]| {
            seen.lock().unwrap().push(x[0]);
            cost(-2.0)(x)
        };
        minimize_lbfgs_resume(&f, &[0.0], &[true], 100, tol_after, after, &mut memory).unwrap();
        assert_eq!(seen.into_inner().unwrap()[1], -200.0, "{before:?} then {after:?}");
    }
}

#[test]
fn pairs_are_not_carried_out_of_a_run_in_rescaled_coordinates() {
    // A unit-length first step works in w = sqrt|g| (z - z0), whose pairs are not in z's units.
    let f = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> { Ok((50.0 * (x[0] - 1.0).powi(2), vec![100.0 * (x[0] - 1.0)])) };
    let mut memory = LbfgsMemory::default();
    let opts = LbfgsOptions { first_step: FirstStep::UnitLength, ..Default::default() };
    minimize_lbfgs_resume(&f, &[0.0], &[true], 100, 1e-14, opts, &mut memory).unwrap();
    assert!(memory.is_empty());
    minimize_lbfgs_resume(&f, &[0.0], &[true], 100, 1e-14, LbfgsOptions::default(), &mut memory).unwrap();
    assert!(!memory.is_empty());
}

#[test]
fn a_budget_stop_ends_at_the_best_point_so_far() {
    // Rosenbrock from (-1.2, 1): far from converged when the sixth evaluation reports the
    // budget spent; the result is the best of the five points evaluated.
    let seen = Mutex::new(Vec::new());
    let f = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
        let mut seen = seen.lock().unwrap();
        if seen.len() == 5 {
            return Err(FitError::Stop(StopReason::BudgetIterations));
        }
        let (a, b) = (x[0], x[1]);
        let v = (1.0 - a).powi(2) + 100.0 * (b - a * a).powi(2);
        seen.push(v);
        Ok((v, vec![-2.0 * (1.0 - a) - 400.0 * a * (b - a * a), 200.0 * (b - a * a)]))
    };
    let m = minimize_lbfgs(&f, &[-1.2, 1.0], &[true, true], 100, 1e-10).unwrap();
    let seen = seen.into_inner().unwrap();
    assert_eq!((m.evaluations, m.stopped_by), (5, Some(StopReason::BudgetIterations)));
    assert_eq!(m.value, seen.iter().copied().fold(f64::INFINITY, f64::min));
    assert!(m.value > 1e-3, "not converged: {m:?}");
}

#[test]
fn line_searches_failing_the_wolfe_conditions_are_counted_and_can_end_the_search() {
    // Cost (x - 1)^2 with a "gradient" 2 (x - 5) (a wrong one, as the IVM's exact strategy
    // has): from x = 0 the steps the cost accepts (f <= 1, x in [0, 2]) and those where the
    // stated slope has flattened (|x - 5| <= 0.9 * 5, x in [0.5, 9.5]) overlap only on [0.5, 2],
    // and L-BFGS soon leaves it (the stated gradient vanishes at 5): some line searches end
    // without the strong Wolfe conditions.
    let wrong = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> { Ok(((x[0] - 1.0).powi(2), vec![2.0 * (x[0] - 5.0)])) };
    let go_on = minimize_lbfgs(&wrong, &[0.0], &[true], 20, 1e-12).unwrap();
    assert!(go_on.failed_line_searches > 0, "{go_on:?}");
    assert!(!go_on.stop_reason.contains(FAILED_LINE_SEARCH), "{go_on:?}");
    let opts = LbfgsOptions { stop_on_failed_line_search: true, ..Default::default() };
    let stop = minimize_lbfgs_opts(&wrong, &[0.0], &[true], 20, 1e-12, opts).unwrap();
    assert_eq!(stop.failed_line_searches, 1, "{stop:?}");
    assert!(stop.stop_reason.contains(FAILED_LINE_SEARCH), "{stop:?}");
    assert!(stop.evaluations < go_on.evaluations, "{stop:?} / {go_on:?}");
    // It ends at the best point it evaluated, never above the start.
    assert!(stop.value <= 1.0, "{stop:?}");
    // A consistent gradient: no failure, and the option changes nothing.
    let f = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
        let (a, b) = (x[0], x[1]);
        Ok(((1.0 - a).powi(2) + 100.0 * (b - a * a).powi(2), vec![-2.0 * (1.0 - a) - 400.0 * a * (b - a * a), 200.0 * (b - a * a)]))
    };
    let plain = minimize_lbfgs(&f, &[-1.2, 1.0], &[true, true], 30, 1e-10).unwrap();
    let checked = minimize_lbfgs_opts(&f, &[-1.2, 1.0], &[true, true], 30, 1e-10, opts).unwrap();
    assert_eq!(plain.failed_line_searches, 0, "{plain:?}");
    assert_eq!((plain.x, plain.value, plain.evaluations), (checked.x, checked.value, checked.evaluations));
}

#[test]
fn the_decrease_line_search_reads_costs_only_and_fails_where_nothing_decreases() {
    // A cost whose stated gradient points uphill (f = x^2, "gradient" -2x): every trial step
    // along its L-BFGS direction raises the cost, so the first line search fails after its
    // trials and the search ends at the start.
    let uphill = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> { Ok((x[0] * x[0], vec![-2.0 * x[0]])) };
    let opts = LbfgsOptions { line_search: LineSearchKind::Decrease, ..Default::default() };
    let m = minimize_lbfgs_opts(&uphill, &[1.0], &[true], 20, 1e-12, opts).unwrap();
    assert_eq!((m.x.clone(), m.value, m.failed_line_searches), (vec![1.0], 1.0, 1), "{m:?}");
    assert_eq!(m.evaluations, 1 + DECREASE_TRIALS, "{m:?}");
    assert!(m.stop_reason.contains(FAILED_LINE_SEARCH), "{m:?}");
    // The wrong gradient of the Wolfe test above, traced by hand. From x = 0 (g = -10) the
    // first direction is +10: trials 10, 5, 2.5 raise the cost (81, 16, 2.25 > 1), 1.25 lowers
    // it (0.0625) and is taken, read off the cost alone. Then g = -7.5, L-BFGS's scale
    // s y / y y = 1.25 * 2.5 / 6.25 = 0.5 gives the direction +3.75: every trial lies right of
    // 1.25, where the cost only rises, so after 20 trials the search fails and ends at 1.25.
    // (A search reading the stated slope at its trial points, which never turns positive
    // before x = 5, would not take 1.25 after exactly four trials.)
    let seen = Mutex::new(Vec::new());
    let wrong = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
        seen.lock().unwrap().push(x[0]);
        Ok(((x[0] - 1.0).powi(2), vec![2.0 * (x[0] - 5.0)]))
    };
    let m = minimize_lbfgs_opts(&wrong, &[0.0], &[true], 20, 1e-12, opts).unwrap();
    let seen = seen.into_inner().unwrap();
    assert_eq!(&seen[..5], &[0.0, 10.0, 5.0, 2.5, 1.25]);
    assert!(seen[5..].iter().all(|&x| x > 1.25), "{seen:?}");
    assert_eq!((m.x, m.value, m.evaluations, m.failed_line_searches), (vec![1.25], 0.0625, 1 + 4 + DECREASE_TRIALS, 1));
    // A consistent gradient: L-BFGS with this search still solves Rosenbrock's problem.
    let rosen = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
        let (a, b) = (x[0], x[1]);
        Ok(((1.0 - a).powi(2) + 100.0 * (b - a * a).powi(2), vec![-2.0 * (1.0 - a) - 400.0 * a * (b - a * a), 200.0 * (b - a * a)]))
    };
    let m = minimize_lbfgs_opts(&rosen, &[-1.2, 1.0], &[true, true], 500, 1e-14, opts).unwrap();
    assert!((m.x[0] - 1.0).abs() < 1e-4 && (m.x[1] - 1.0).abs() < 1e-4, "{m:?}");
}

#[test]
fn a_timeout_is_an_error_not_a_result() {
    let f = |_: &[f64]| -> Result<(f64, Vec<f64>), FitError> { Err(FitError::Timeout { seconds: 1.0 }) };
    assert!(matches!(minimize_lbfgs(&f, &[0.0], &[true], 10, 1e-10), Err(FitError::Timeout { .. })));
}

#[test]
fn the_number_of_curvature_pairs_reaches_the_solver() {
    // Extended Rosenbrock in 6 dimensions: with one pair the quasi-Newton model is poorer than
    // with the default ten, so the two searches evaluate different points (the same minimum).
    let f = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
        let (mut v, mut g) = (0.0, vec![0.0; x.len()]);
        for i in (0..x.len()).step_by(2) {
            let (a, b) = (x[i], x[i + 1]);
            v += (1.0 - a).powi(2) + 100.0 * (b - a * a).powi(2);
            g[i] = -2.0 * (1.0 - a) - 400.0 * a * (b - a * a);
            g[i + 1] = 200.0 * (b - a * a);
        }
        Ok((v, g))
    };
    let x0 = [-1.2, 1.0, -1.0, 1.5, 0.5, -0.3];
    let run = |pairs| minimize_lbfgs_opts(&f, &x0, &[true; 6], 2000, 1e-14, LbfgsOptions { pairs, ..Default::default() }).unwrap();
    let (one, ten) = (run(Some(1)), run(None));
    assert!(one.x.iter().chain(&ten.x).all(|v| (v - 1.0).abs() < 1e-3), "{one:?} {ten:?}");
    assert_ne!(one.evaluations, ten.evaluations, "the pair count changes the path");
}

#[test]
fn the_cost_in_scaled_coordinates_follows_the_chain_rule() {
    // h(u) = f(u / c): its gradient g(u / c) / c against central differences of h.
    let f = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
        let v = (x[0] * x[1]).sin() + x[1].exp() * x[2] * x[2];
        Ok((v, vec![x[1] * (x[0] * x[1]).cos(), x[0] * (x[0] * x[1]).cos() + x[1].exp() * x[2] * x[2], 2.0 * x[1].exp() * x[2]]))
    };
    let c = [2.0, 0.5, 3.0];
    let h = in_coordinates(&f, &c);
    let u = [0.7, -0.4, 1.3];
    let (_, g) = h(&u).unwrap();
    for i in 0..3 {
        let (mut up, mut down) = (u, u);
        up[i] += 1e-6;
        down[i] -= 1e-6;
        let fd = (h(&up).unwrap().0 - h(&down).unwrap().0) / 2e-6;
        assert!((fd - g[i]).abs() < 1e-8, "entry {i}: {fd} against {}", g[i]);
    }
}

#[test]
fn a_search_in_scaled_coordinates_takes_another_path_to_the_same_minimum() {
    // f(x) = (a_1 x_1^2 + a_2 x_2^2) / 2 from (1, 1), a = (3, 5). In u = c x with c = (1, 2)
    // the gradient-long first step moves x_i by -a_i x_i / c_i^2: to (-2, -0.25), against
    // x0 - g = (-2, -4) in x itself. Both searches end at the origin.
    let a = [3.0, 5.0];
    for (c, want) in [([1.0, 1.0], [-2.0, -4.0]), ([1.0, 2.0], [-2.0, -0.25])] {
        let seen = Mutex::new(Vec::new());
        let f = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
            seen.lock().unwrap().push(x.to_vec());
            Ok((0.5 * (a[0] * x[0] * x[0] + a[1] * x[1] * x[1]), vec![a[0] * x[0], a[1] * x[1]]))
        };
        let m = minimize_lbfgs_in_coordinates(&f, &[1.0, 1.0], &[true, true], 100, 1e-16, LbfgsOptions::default(), &c).unwrap();
        let seen = seen.into_inner().unwrap();
        assert!((seen[1][0] - want[0]).abs() < 1e-12 && (seen[1][1] - want[1]).abs() < 1e-12, "c = {c:?}: {:?}", seen[1]);
        assert!(m.x.iter().all(|v| v.abs() < 1e-6), "c = {c:?}: {m:?}");
    }
}

#[test]
fn log_squared_scales_the_length_scales_of_a_per_class_kernel_and_nothing_else() {
    // Two classes of SE-ARD (two inputs) plus white noise, then two inducing coordinates: only
    // the four length-scales move in log l^2 = 2 log l.
    let kernels = crate::kernels::KernelSet::per_class(
        (0..2)
            .map(|_| {
                let ard = crate::kernels::SqExp { log_variance: 0.0, log_lengthscales: vec![0.0, 0.0], learn_variance: true };
                let white = crate::kernels::White { log_variance: 0.0, learn_variance: true };
                Box::new(crate::kernels::Sum::new(vec![Box::new(ard), Box::new(white)])) as Box<dyn crate::kernels::Kernel>
            })
            .collect(),
    );
    let names = kernels.param_names();
    assert_eq!(names.len(), 8);
    let c = LengthscaleCoordinate::LogSquared.scales(&names, names.len() + 2);
    let expected: Vec<f64> = names.iter().map(|n| if n.contains("lengthscale") { 2.0 } else { 1.0 }).chain([1.0, 1.0]).collect();
    assert_eq!(c, expected);
    assert_eq!(c.iter().filter(|&&s| s == 2.0).count(), 4, "{names:?}");
    assert!(LengthscaleCoordinate::Log.scales(&names, 10).iter().all(|&s| s == 1.0));
}

#[test]
fn false_position_finds_the_root_of_a_decreasing_derivative_or_an_end_point() {
    // Roots in closed form: linear, exponential, and a strongly convex one where plain
    // regula falsi keeps one end fixed and crawls (the Illinois down-weighting must fix it
    // within the 60 steps).
    let cases: [(&dyn Fn(f64) -> f64, f64); 4] = [
        (&|e| 0.3 - e, 0.3),
        (&|e| (-5.0 * e).exp() - 0.5, 2f64.ln() / 5.0),
        (&|e| (1.0 - e).powi(10) - 0.5, 1.0 - 0.5f64.powf(0.1)),
        (&|e| 1.0 / (e + 1e-3) - 10.0, 0.1 - 1e-3),
    ];
    for (i, (phi, root)) in cases.iter().enumerate() {
        let mut calls = 0;
        let eta = false_position(|e| {
            calls += 1;
            phi(e)
        });
        assert!((eta - root).abs() < 1e-10, "case {i}: {eta} against {root}");
        assert!(calls <= 62, "case {i}: {calls} evaluations");
    }
    // No sign change: the end-point the derivative points to; NaN at 0 counts as no ascent.
    assert_eq!(false_position(|e| -1.0 - e), 0.0);
    assert_eq!(false_position(|_| f64::NAN), 0.0);
    assert_eq!(false_position(|e| 2.0 - e), 1.0);
}

/// `Minimum::stop` names what ended the search: its convergence test, the iteration limit, a
/// budget, or a search that gave up. A gradient pointing the wrong way (the stated slope says
/// descend towards +x on f = (x + 1)^2 from 0, where the cost rises) leaves no step the line
/// search accepts: the search ends before both its test and its limit, so it is `Stalled`, not
/// `Converged` (the label every such fit carried before).
#[test]
fn the_stop_reason_tells_convergence_from_a_limit_and_from_giving_up() {
    let smooth = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> { Ok(((x[0] - 1.0).powi(2), vec![2.0 * (x[0] - 1.0)])) };
    let m = minimize_lbfgs(&smooth, &[0.0], &[true], 100, 1e-10).unwrap();
    assert!(m.converged && m.stop(100) == StopReason::Converged, "{m:?}");
    let rosenbrock = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
        let (a, b) = (x[0], x[1]);
        Ok(((1.0 - a).powi(2) + 100.0 * (b - a * a).powi(2), vec![-2.0 * (1.0 - a) - 400.0 * a * (b - a * a), 200.0 * (b - a * a)]))
    };
    let m = minimize_lbfgs(&rosenbrock, &[-1.2, 1.0], &[true, true], 2, 1e-10).unwrap();
    assert!(!m.converged && m.stop(2) == StopReason::MaxIterations, "{m:?}");
    let wrong_slope = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> { Ok(((x[0] + 1.0).powi(2), vec![-2.0 * (x[0] + 1.0)])) };
    let m = minimize_lbfgs(&wrong_slope, &[0.0], &[true], 100, 1e-10).unwrap();
    assert!(!m.converged && m.iterations < 100 && m.stop(100) == StopReason::Stalled, "{m:?}");
    // Nothing free: nothing to do, which is convergence.
    let m = minimize_lbfgs(&smooth, &[0.0], &[false], 100, 1e-10).unwrap();
    assert_eq!(m.stop(100), StopReason::Converged);
}
