"""Run 25a: the flash SDPA kernel on this torch, and its no-dropout in-place form (absent in 2.11)."""
import torch, torch.nn.functional as F
aten = torch.ops.aten
print("torch", torch.__version__)
op = getattr(aten, "_flash_attention_forward_no_dropout_inplace", None)
print("inplace op:", None if op is None else op.default._schema)
print("sdpa flash:", aten._scaled_dot_product_flash_attention.default._schema)
dev = "cuda"
def desc(x):
    return (f"{type(x).__name__} {tuple(x.shape)} {x.stride()} {x.dtype} {x.device}"
            if isinstance(x, torch.Tensor) else repr(x))
for case in ("bhsd", "bshd-t", "gqa"):
    for causal in (False, True):
        g = torch.Generator(device=dev).manual_seed(0)
        B, H, S, D = 2, 8, 384, 64
        Hk = 2 if case == "gqa" else H
        if case == "bshd-t":
            q, k, v = (torch.randn(B, S, H, D, device=dev, dtype=torch.bfloat16, generator=g).transpose(1, 2) for _ in range(3))
        else:
            q = torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16, generator=g)
            k, v = (torch.randn(B, Hk, S, D, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(2))
        try:
            ref = aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False)
        except Exception as e:
            print(case, causal, "ref failed:", str(e)[:200]); continue
        if case == "bhsd" and not causal:
            for i, r in enumerate(ref):
                print("  out", i, desc(r))
        out = torch.full_like(q, float("nan"))
        try:
            lse = op.default(out.transpose(1, 2), q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                             None, None, S, S, 0.0, causal, False)
        except Exception as e:
            print(case, causal, "inplace failed:", str(e)[:300]); continue
        print(case, causal, "out equal", torch.equal(out, ref[0]), "lse equal", torch.equal(lse, ref[1]),
              "lse", desc(lse), "out strides", out.stride(), ref[0].stride())
        # backward with garbage seed/offset: does dropout-free backward read them?
        gout = torch.randn_like(ref[0])
        a = aten._scaled_dot_product_flash_attention_backward(gout, q, k, v, ref[0], ref[1], ref[2], ref[3], ref[4], ref[5], 0.0, causal, ref[6], ref[7])
        s2 = torch.full_like(ref[6], 12345) if ref[6].numel() else ref[6]
        o2 = torch.full_like(ref[7], 777) if ref[7].numel() else ref[7]
        b = aten._scaled_dot_product_flash_attention_backward(gout, q, k, v, out, lse, ref[2], ref[3], ref[4], ref[5], 0.0, causal, s2, o2)
        print("   backward equal with other seed/offset and in-place out/lse:", all(torch.equal(x, y) for x, y in zip(a, b)))
# seed/offset under capture
q = torch.randn(2, 8, 256, 64, device=dev, dtype=torch.bfloat16)
s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    aten._scaled_dot_product_flash_attention(q, q, q, 0.0, False, False)
torch.cuda.current_stream().wait_stream(s)
gr = torch.cuda.CUDAGraph()
with torch.cuda.graph(gr):
    r = aten._scaled_dot_product_flash_attention(q, q, q, 0.0, False, False)
print("under capture: seed", desc(r[6]), "offset", desc(r[7]))
# which kernel does a bf16 SDPA in a compiled training graph get, and what fxslots does with it
class Attn(torch.nn.Module):
    def __init__(self, gqa=False):
        super().__init__(); self.qkv = torch.nn.Linear(512, 512 + 2 * (128 if gqa else 512)); self.o = torch.nn.Linear(512, 512); self.gqa = gqa
    def forward(self, x):
        B, S, _ = x.shape
        kvd = 128 if self.gqa else 512
        q, k, v = self.qkv(x).split([512, kvd, kvd], -1)
        q = q.view(B, S, 8, 64).transpose(1, 2); k = k.view(B, S, -1, 64).transpose(1, 2); v = v.view(B, S, -1, 64).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.gqa)
        return self.o(y.transpose(1, 2).reshape(B, S, 512))
import fxslots
for gqa in (False, True):
    m = Attn(gqa).to(dev, torch.bfloat16)
    x = torch.randn(2, 256, 512, device=dev, dtype=torch.bfloat16)
    rep = fxslots.explain(m, x)
    txt = str(rep)
    print("==== explain gqa", gqa)
    print("\n".join(l for l in txt.splitlines() if "attention" in l or "copy" in l.lower() or "getitem" in l)[:6000])
