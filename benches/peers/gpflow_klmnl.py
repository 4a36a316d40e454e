#!/usr/bin/env python3
"""GPflow's variational GP with the softmax likelihood on exactly the problems `cargo bench --bench
klmnl` times (issue 25's peer for `klmnl`), one core, process CPU seconds of the fit (median of
--reps).

    MCGP_BENCH_EXPORT=/tmp/peer cargo bench --bench klmnl -- glass    # writes the rows it fits
    python3 benches/peers/gpflow_klmnl.py /tmp/peer [glass thyroid ...] [--reps=3] [--fixed-draws=S]

The rows are the bench's split 0 (60/40), standardised on the training rows as the bench does.
The model is what a GPflow user writes for "the softmax GP with a full Gaussian posterior and
learned ARD squared-exponential kernel", started where mcgp starts (variance 1, every
length-scale 1): `gpflow.models.VGP` with one `SquaredExponential` shared by the C latent
functions and `gpflow.likelihoods.Softmax(C)`, trained by `gpflow.optimizers.Scipy` (L-BFGS-B),
everything else default. GPflow's softmax expectations are Monte Carlo (100 draws a call, fresh
at every evaluation), so its objective is noisy and L-BFGS-B usually stops on a failed line
search, well short of the optimum; TensorFlow's seed is set per fit, so reruns repeat.
`--fixed-draws=S` instead draws S standard-normal vectors per training row once per fit and
reuses them at every evaluation (common random numbers): the objective is then deterministic
and L-BFGS-B runs to its own convergence (of the S-draw objective), the converged peer. Each
fit's ELBO is re-estimated afterwards with 20,000 fresh draws, comparable across runs and with
mcgp's bound (a lower bound on the same ELBO). The test log predictive is GPflow's own
`predict_y` (also Monte Carlo). GPflow is not a dependency of mcgp: install it by hand
(`pip install gpflow tensorflow-cpu`) to run this.
"""
import os

# One core, as the bench: every thread pool off before TensorFlow loads.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
    os.environ[var] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)

import gpflow  # noqa: E402

ELBO_DRAWS = 20_000


class FixedDraws(gpflow.likelihoods.Softmax):
    """Softmax whose Monte Carlo expectations over the training rows reuse one set of draws."""

    def __init__(self, n_classes, eps):
        super().__init__(n_classes)
        self.set_draws(eps)

    def set_draws(self, eps):
        self.eps = tf.constant(eps)
        self.num_monte_carlo_points = eps.shape[0]

    def _mc_quadrature(self, funcs, Fmu, Fvar, logspace=False, epsilon=None, **Ys):
        if epsilon is None and Fmu.shape[0] == self.eps.shape[1]:
            epsilon = self.eps
        return super()._mc_quadrature(funcs, Fmu, Fvar, logspace=logspace, epsilon=epsilon, **Ys)


def load(path):
    rows = np.loadtxt(path, delimiter=",", ndmin=2)
    return rows[:, :-1], rows[:, -1].astype(int)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    reps, fixed_draws = 3, None
    for a in sys.argv[1:]:
        if a.startswith("--reps="):
            reps = int(a.split("=", 1)[1])
        if a.startswith("--fixed-draws="):
            fixed_draws = int(a.split("=", 1)[1])
    folder, names = args[0], args[1:] or ["glass"]
    print(f"GPflow {gpflow.__version__}, TensorFlow {tf.__version__}, numpy {np.__version__}, one thread")
    for name in names:
        x, y = load(os.path.join(folder, f"{name}-train.csv"))
        xt, yt = load(os.path.join(folder, f"{name}-test.csv"))
        d = x.shape[1]
        n_classes = int(max(y.max(), yt.max())) + 1

        def fit(seed):
            tf.random.set_seed(seed)
            kernel = gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=np.ones(d))
            if fixed_draws is None:
                likelihood = gpflow.likelihoods.Softmax(n_classes)
            else:
                eps = np.random.default_rng(seed).standard_normal((fixed_draws, len(y), n_classes))
                likelihood = FixedDraws(n_classes, eps)
            model = gpflow.models.VGP(
                (x, y.reshape(-1, 1).astype(np.int64)), kernel=kernel, likelihood=likelihood, num_latent_gps=n_classes
            )
            result = gpflow.optimizers.Scipy().minimize(model.training_loss, model.trainable_variables, method="L-BFGS-B")
            return model, result

        def elbo(model, seed):
            """The fit's ELBO by ELBO_DRAWS fresh draws (off the clock)."""
            eps = np.random.default_rng(10_000 + seed).standard_normal((ELBO_DRAWS, len(y), n_classes))
            if isinstance(model.likelihood, FixedDraws):
                kept = model.likelihood.eps.numpy()
                model.likelihood.set_draws(eps)
                value = float(model.elbo())
                model.likelihood.set_draws(kept)
            else:
                model.likelihood.num_monte_carlo_points = ELBO_DRAWS
                value = float(model.elbo())
                model.likelihood.num_monte_carlo_points = 100
            return value

        runs = []
        for seed in range(reps):
            start = time.process_time()
            model, result = fit(seed)
            runs.append((time.process_time() - start, seed, model, result))
        runs.sort(key=lambda r: r[0])
        secs, seed, model, result = runs[len(runs) // 2]
        tf.random.set_seed(seed)
        probs, _ = model.predict_y(xt)
        probs = probs.numpy()
        with np.errstate(divide="ignore"):
            log_pred = np.log(probs[np.arange(len(yt)), yt])
        errors = int((probs.argmax(axis=1) != yt).sum())
        by_seed = sorted(runs, key=lambda r: r[1])
        times = ", ".join(f"{r[0]:.2f}" for r in by_seed)
        evals = ", ".join(str(r[3].nfev) for r in by_seed)
        elbos = ", ".join(f"{elbo(r[2], r[1]):.3f}" for r in by_seed)
        draws = "Monte Carlo, 100 fresh draws an evaluation" if fixed_draws is None else f"{fixed_draws} fixed draws"
        print(
            f"gpflow-vgp-softmax {name} (n = {len(y)}, C = {len(np.unique(y))}), ARD learned, {draws}: "
            f"{secs:.3f} CPU s (median of {reps}; by seed {times}; the first fit of a process also traces "
            f"TensorFlow's graph), evaluations {evals}, ELBO by {ELBO_DRAWS} draws {elbos}; median fit: "
            f"stop {result.message}, test log pred {log_pred.mean():.6f} (sum {log_pred.sum():.1f}), "
            f"{errors} errors of {len(yt)}"
        )


if __name__ == "__main__":
    main()
