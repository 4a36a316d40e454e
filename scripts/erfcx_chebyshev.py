# Generates the constants of src/special.rs: normal_cdf_slice (Chebyshev coefficients of
# (1 + 2a) erfcx(a) in y = (a - 3.75)/(a + 3.75), Schonfelder 1978) and the exp split of ln 2.
# Run with python3 and mpmath (50 digits); the printed values are pasted as they are.
import mpmath as mp, struct
mp.mp.dps = 50
K = mp.mpf('3.75')
def g(y):
    a = K*(1+y)/(1-y)
    return (1+2*a)*mp.erfc(a)*mp.exp(a*a)
N = 64
nodes = [mp.cos(mp.pi*(k+mp.mpf(1)/2)/N) for k in range(N)]
vals = [g(y) for y in nodes]
c = [2*sum(vals[k]*mp.cos(mp.pi*r*(k+mp.mpf(1)/2)/N) for k in range(N))/N for r in range(N)]
c[0] /= 2
print("const ERFCX_CHEB: [f64; 25] = [")
for r in range(25):
    print("    %s," % repr(float(c[r])))
print("];")
print("dropped tail sum", mp.nstr(sum(abs(x) for x in c[25:]), 5))
ln2 = mp.log(2)
b = struct.unpack('<Q', struct.pack('<d', float(ln2)))[0] & 0xFFFFFFFFFFE00000
hi = struct.unpack('<d', struct.pack('<Q', b))[0]
lo = float(ln2 - mp.mpf(hi))
print("LN2_HI", repr(hi), hex(b), "LN2_LO", repr(lo))
print("LOG2E", repr(float(1/ln2)))
import math
print([repr(1.0/math.factorial(k)) for k in range(14)])
