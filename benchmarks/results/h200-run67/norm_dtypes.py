# Run 67: the dtypes the norms return (real kernels) against their fake kernels, per device:
# where they differ, fxslots would type a slot wrong (passes/retype.py)
import torch, torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
aten = torch.ops.aten
def cases(dev):
    x = torch.randn(2, 8, 4, 4, dtype=torch.bfloat16, device=dev)
    w = torch.randn(8, device=dev); b = torch.randn(8, device=dev)
    rm = torch.zeros(8, device=dev); rv = torch.ones(8, device=dev)
    xl = torch.randn(4, 8, dtype=torch.bfloat16, device=dev)
    yield "bn_legit_functional", lambda: aten._native_batch_norm_legit_functional(x, w, b, rm, rv, True, 0.1, 1e-5)
    yield "bn_legit_functional_bf16w", lambda: aten._native_batch_norm_legit_functional(x, w.bfloat16(), b.bfloat16(), rm, rv, True, 0.1, 1e-5)
    yield "bn_legit", lambda: aten._native_batch_norm_legit(x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5)
    yield "bn_legit_nostats", lambda: aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5)
    yield "native_batch_norm", lambda: aten.native_batch_norm(x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5)
    yield "layer_norm_mixed", lambda: aten.native_layer_norm(xl, [8], w, b, 1e-5)
    yield "layer_norm_bf16w", lambda: aten.native_layer_norm(xl, [8], w.bfloat16(), b.bfloat16(), 1e-5)
    yield "layer_norm_now", lambda: aten.native_layer_norm(xl, [8], None, None, 1e-5)
    yield "group_norm_mixed", lambda: aten.native_group_norm(x, w, b, 2, 8, 16, 2, 1e-5)
    yield "group_norm_bf16w", lambda: aten.native_group_norm(x, w.bfloat16(), b.bfloat16(), 2, 8, 16, 2, 1e-5)
    yield "group_norm_now", lambda: aten.native_group_norm(x, None, None, 2, 8, 16, 2, 1e-5)
    yield "rms_norm_mixed", lambda: aten._fused_rms_norm(xl, [8], w, 1e-5) if hasattr(aten, "_fused_rms_norm") else None
def dts(r):
    return [t.dtype for t in r] if isinstance(r, (tuple, list)) else r
import sys
dev = sys.argv[1] if len(sys.argv) > 1 else "cpu"
def tryit(f):
    try: return dts(f())
    except Exception as e: return repr(e)[:50]
real = {}
if dev == "cpu" or torch.cuda.is_available():
    real = {n: tryit(f) for n, f in cases(dev)}
with FakeTensorMode():
    fake = {}
    for n, f in cases(dev):
        try: fake[n] = dts(f())
        except Exception as e: fake[n] = repr(e)[:60]
for n in fake:
    print(f"{n:28s} real={real.get(n)} fake={fake[n]}", "MISMATCH" if real.get(n) is not None and real.get(n) != fake[n] else "")
