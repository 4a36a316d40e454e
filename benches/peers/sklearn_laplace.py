#!/usr/bin/env python3
"""scikit-learn's Laplace GP classifier on exactly the problems `cargo bench --bench laplace` times
(issue 25's peer), one core, process CPU seconds of the fit (median of --reps).

    MCGP_BENCH_EXPORT=/tmp/peer cargo bench --bench laplace     # writes the rows it fits
    python3 benches/peers/sklearn_laplace.py /tmp/peer [glass thyroid ...]

The rows are the bench's split 0 (60/40), standardised on the training rows as the bench does.
The kernel is what a user of scikit-learn writes for "ARD squared exponential with learned
variance and length-scales", started where mcgp starts (variance 1, every length-scale 1):
ConstantKernel(1.0) * RBF(ones(d)), everything else default (one-vs-rest for C > 2, each binary
Laplace fit learning its own kernel by L-BFGS-B, no restarts). scikit-learn is not a dependency
of mcgp: install it by hand (`pip install scikit-learn`) to run this.
"""
import os

# One core, as the bench: BLAS threads off before numpy loads.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import sklearn  # noqa: E402
from sklearn.gaussian_process import GaussianProcessClassifier  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.gaussian_process.kernels import RBF, ConstantKernel  # noqa: E402

# Length-scales of irrelevant inputs run to scikit-learn's bound (1e5) and warn; mcgp's search
# lets them drift as far as its tolerance allows. Not printed.
warnings.filterwarnings("ignore", category=ConvergenceWarning)


def load(path):
    rows = np.loadtxt(path, delimiter=",", ndmin=2)
    return rows[:, :-1], rows[:, -1].astype(int)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    reps = 5
    for a in sys.argv[1:]:
        if a.startswith("--reps="):
            reps = int(a.split("=", 1)[1])
    folder, names = args[0], args[1:] or ["glass", "thyroid", "wine", "iris"]
    print(f"scikit-learn {sklearn.__version__}, numpy {np.__version__}, one thread")
    for name in names:
        x, y = load(os.path.join(folder, f"{name}-train.csv"))
        xt, yt = load(os.path.join(folder, f"{name}-test.csv"))
        d = x.shape[1]

        def fit():
            kernel = ConstantKernel(1.0) * RBF(length_scale=np.ones(d))
            return GaussianProcessClassifier(kernel=kernel).fit(x, y)

        times = []
        for _ in range(reps):
            start = time.process_time()
            model = fit()
            times.append(time.process_time() - start)
        proba = model.predict_proba(xt)
        # Column j is class model.classes_[j]; a test class absent from training gets probability 0.
        full = np.zeros((len(yt), max(yt.max(), y.max()) + 1))
        full[:, model.classes_] = proba
        with np.errstate(divide="ignore"):
            log_pred = np.log(full[np.arange(len(yt)), yt])
        errors = int((full.argmax(axis=1) != yt).sum())
        print(
            f"sklearn-gpc {name} (n = {len(y)}, C = {len(np.unique(y))}), ARD learned: "
            f"{statistics.median(times):.3f} CPU s (median of {reps}), test log pred {log_pred.mean():.6f} "
            f"(sum {log_pred.sum():.1f}), {errors} errors of {len(yt)}"
        )


if __name__ == "__main__":
    main()
