# The independent GFITC-EP oracle of src/methods/gfitc/tests.rs (log_z_ep_matches_an_independent_dense_ep):
# python3 scripts/gfitc_ep_oracle.py prints the three log Z_EP values pinned there (about 40 s).
# Independent GFITC-EP oracle: dense N x N linear algebra, tilted moments by 1-D quadrature
# (scipy.integrate.quad, not the closed form), sequential (one factor at a time) undamped EP
# updates, and log Z_EP in the site-normaliser form
#   log Z_EP = sum_factors log Ztilde_j + sum_c log int N(f | 0, K_c) prod sites df,
# not the Rust code's marginal-cavity form.
import numpy as np
from scipy import integrate
from scipy.stats import norm

def se(A, B, amp, ls):
    d = ((A[:, None, :] - B[None, :, :]) / ls) ** 2
    return amp * np.exp(-0.5 * d.sum(-1))

def fitc_prior(X, Z, amp, ls, white):
    Kmm = se(Z, Z, amp, ls) + white * np.eye(len(Z))   # white noise on K(Z, Z)
    Kmn = se(Z, X, amp, ls)                             # none on the cross-covariance
    Q = Kmn.T @ np.linalg.solve(Kmm, Kmn)
    kappa = np.full(len(X), amp + white)                # white noise on kappa
    return Q + np.diag(kappa - np.diag(Q))

def tilted(my, vy, mk, vk):
    # moments of N(fy|my,vy) N(fk|mk,vk) [fy > fk], by quadrature over one variable each
    sy, sk = np.sqrt(vy), np.sqrt(vk)
    kw = dict(epsabs=1e-15, epsrel=1e-12, limit=200)
    py = lambda f: norm.pdf(f, my, sy) * norm.cdf((f - mk) / sk)     # marginal of fy (unnormalised)
    pk = lambda f: norm.pdf(f, mk, sk) * norm.sf((f - my) / sy)      # marginal of fk
    lo_y, hi_y = my - 40 * sy, my + 40 * sy
    lo_k, hi_k = mk - 40 * sk, mk + 40 * sk
    Z = integrate.quad(py, lo_y, hi_y, points=[mk], **kw)[0]
    Ey = integrate.quad(lambda f: f * py(f), lo_y, hi_y, points=[mk], **kw)[0] / Z
    Eyy = integrate.quad(lambda f: f * f * py(f), lo_y, hi_y, points=[mk], **kw)[0] / Z
    Ek = integrate.quad(lambda f: f * pk(f), lo_k, hi_k, points=[my], **kw)[0] / Z
    Ekk = integrate.quad(lambda f: f * f * pk(f), lo_k, hi_k, points=[my], **kw)[0] / Z
    return Z, (Ey, Eyy - Ey ** 2), (Ek, Ekk - Ek ** 2)

def gauss_int(m, v, tau, nu):
    # log int N(f|m,v) exp(-tau f^2/2 + nu f) df
    vn = 1 / (1 / v + tau); mn = vn * (m / v + nu)
    return 0.5 * np.log(vn / v) + 0.5 * mn * mn / vn - 0.5 * m * m / v

def ep(Ks, y, tol=1e-12, max_sweeps=2000):
    C, N = len(Ks), len(y)
    fac = [(i, k) for i in range(N) for k in range(C) if k != y[i]]
    # site (tau, nu) per factor and side; start: precision 1e-2, natural mean 0
    tau = {(j, s): 1e-2 for j in fac for s in 'yk'}
    nu = {(j, s): 0.0 for j in fac for s in 'yk'}
    cls = lambda j, s: y[j[0]] if s == 'y' else j[1]
    def post():
        P = []
        for c in range(C):
            T = np.zeros(N); V = np.zeros(N)
            for (j, s) in tau:
                if cls(j, s) == c: T[j[0]] += tau[j, s]; V[j[0]] += nu[j, s]
            S = np.linalg.inv(np.linalg.inv(Ks[c]) + np.diag(T))
            P.append((S @ V, S, T, V))
        return P
    for sweep in range(max_sweeps):
        change = 0.0
        for j in fac:
            P = post()
            cav = {}
            for s in 'yk':
                c = cls(j, s); m, v = P[c][0][j[0]], P[c][1][j[0], j[0]]
                vc = 1 / (1 / v - tau[j, s]); mc = vc * (m / v - nu[j, s]); cav[s] = (mc, vc)
                assert vc > 0
            Z, ty, tk = tilted(*cav['y'], *cav['k'])
            for s, (mt, vt) in (('y', ty), ('k', tk)):
                mc, vc = cav[s]
                nt, nn = 1 / vt - 1 / vc, mt / vt - mc / vc
                change = max(change, abs(nt - tau[j, s]), abs(nn - nu[j, s]))
                tau[j, s], nu[j, s] = nt, nn
        if change < tol:
            break
    P = post()
    lz = 0.0
    for c in range(C):   # log int N(f|0,K) exp(-f'Tf/2 + V'f) df = 1/2 log|S|/|K| + 1/2 V'S V
        mu, S, T, V = P[c]
        lz += 0.5 * (np.linalg.slogdet(S)[1] - np.linalg.slogdet(Ks[c])[1]) + 0.5 * V @ mu
    for j in fac:        # log Ztilde_j = log Z_j - log int cavity_y cavity_k site_y site_k
        cav = {}
        for s in 'yk':
            c = cls(j, s); m, v = P[c][0][j[0]], P[c][1][j[0], j[0]]
            vc = 1 / (1 / v - tau[j, s]); cav[s] = (vc * (m / v - nu[j, s]), vc)
        Z = tilted(*cav['y'], *cav['k'])[0]
        lz += np.log(Z) - sum(gauss_int(*cav[s], tau[j, s], nu[j, s]) for s in 'yk')
    return lz, sweep, tau, nu

if __name__ == '__main__':
    np.set_printoptions(precision=17)
    ls = np.array([1.2, 1.2]); white = 0.2
    # Case 1: one row, M = 1, amplitude 1.5 in every class: f^c ~ N(0, 1.7), exact p = 1/3.
    X = np.array([[0.3, -0.2]]); y = [1]
    Zs = [np.array([[0.0, 0.0]]), np.array([[1.0, 1.0]]), np.array([[-1.0, 0.5]])]
    Ks = [fitc_prior(X, Z, 1.5, ls, white) for Z in Zs]
    lz, sw, _, _ = ep(Ks, y); print('case1 symmetric', repr(lz), sw, np.log(1 / 3))
    # Case 2: one row, unequal amplitudes 0.5, 1.5, 3.0 (+ 0.2 white): exact by quadrature.
    amps = [0.5, 1.5, 3.0]
    Ks = [fitc_prior(X, Z, a, ls, white) for Z, a in zip(Zs, amps)]
    lz, sw, _, _ = ep(Ks, y)
    v = [a + white for a in amps]
    ex = integrate.quad(lambda f: norm.pdf(f, 0, np.sqrt(v[1])) * norm.cdf(f / np.sqrt(v[0])) * norm.cdf(f / np.sqrt(v[2])), -40, 40, epsabs=0, epsrel=1e-13)[0]
    print('case2 one row unequal', repr(lz), sw, 'exact', repr(np.log(ex)))
    # Case 3: four rows, M = 2, unequal amplitudes: correlated FITC prior, nonzero posterior means.
    X = np.array([[0.3, -0.2], [-0.8, 0.4], [1.1, 0.9], [0.0, -1.3]]); y = [1, 0, 2, 1]
    Zs = [np.array([[0.0, 0.0], [1.0, -0.5]]), np.array([[-0.5, 0.5], [0.8, 0.2]]), np.array([[1.0, 1.0], [-1.0, -1.0]])]
    amps = [0.8, 1.5, 2.5]
    Ks = [fitc_prior(X, Z, a, ls, white) for Z, a in zip(Zs, amps)]
    lz, sw, tau, nu = ep(Ks, y); print('case3 four rows', repr(lz), sw)
