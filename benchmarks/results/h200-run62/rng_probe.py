"""Runs 61b, 62a: what a failed capture leaves in a registered generator (torch 2.11), and whether
torch.compile's default hits the flash-backward stride assertion of 61a's first test model."""
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

torch.cuda.init()  # default_generators is empty until CUDA is initialised (61b failed there)


def use(label, gen=None):
    try:
        torch.rand(4, device="cuda", generator=gen)
        torch.cuda.synchronize()
        print(f"{label}: ok")
    except Exception as e:
        print(f"{label}: {type(e).__name__}: {str(e).splitlines()[0][:150]}")


def failed_capture(gen, mode):
    g = torch.cuda.CUDAGraph()
    g.register_generator_state(gen)
    try:
        with torch.cuda.graph(g, capture_error_mode=mode):
            torch.rand(4, device="cuda", generator=gen)
            torch.rand(4, device="cuda")
            torch.zeros(1, device="cuda").item()
    except Exception as e:
        print(f"  capture ({type(e).__name__}) ({mode}) failed: {str(e).splitlines()[0][:150]}")
    del g


def probe(register):
    g = torch.cuda.CUDAGraph()
    if register:
        g.register_generator_state(register)
    with torch.cuda.graph(g):
        torch.zeros(1, device="cuda")
    del g


for mode in ("thread_local", "global"):
    for recovery in ("none", "probe", "probe+registered"):
        gen = torch.cuda.default_generators[0].clone_state()
        use(f"{mode}/{recovery} before")
        failed_capture(gen, mode)
        if recovery != "none":
            try:
                probe(gen if recovery == "probe+registered" else None)
            except Exception as e:
                print(f"  probe failed: {str(e).splitlines()[0][:150]}")
        use(f"{mode}/{recovery} registered generator after", gen)
        use(f"{mode}/{recovery} default generator after")
        probe(None)  # leave the default generator usable for the next case


class Expanded(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qk = torch.nn.Linear(64, 512, dtype=torch.bfloat16)
        self.v = torch.nn.Parameter(torch.eye(64, dtype=torch.bfloat16))

    def forward(self, x, ckpt):
        def attend(x):
            q, k = self.qk(x).view(2, 64, 2, 4, 64).permute(2, 0, 3, 1, 4)
            return F.scaled_dot_product_attention(q, k, self.v.expand(2, 4, 64, 64),
                                                  dropout_p=0.3)
        return checkpoint(attend, x, use_reentrant=False) if ckpt else attend(x)


from torch.nn.attention import SDPBackend, sdpa_kernel

for ckpt in (True, False):
    torch._dynamo.reset()
    m = Expanded().cuda()
    f = torch.compile(m)
    x = torch.randn(2, 64, 64, device="cuda", dtype=torch.bfloat16)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        try:
            f(x, ckpt).sum().backward()
            print(f"torch.compile default, expanded value, checkpoint={ckpt}: ok")
        except Exception as e:
            print(f"torch.compile default, expanded value, checkpoint={ckpt}: "
                  f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
