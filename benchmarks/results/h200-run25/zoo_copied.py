"""Run 25: what the zoo copies on this device, group by group, and why (issue 11). Args: [bf16 [dropout]]."""
import sys, collections
sys.path.insert(0, "tests")
import torch, fxslots, zoo
DROP = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
DEV = "cuda" if torch.cuda.is_available() else "cpu"
from fxslots.geometry import evaluate
from fxslots.report import recording
from fxslots.schemas import Write

for dtype in ([torch.float32] if len(sys.argv) < 2 else [torch.float32, torch.bfloat16]):
    for family in ("llama", "t5", "mixtral", "bert"):
        model = zoo.build(family, dropout=DROP).to(DEV).to(dtype)
        xs = [x.to(DEV) for x in zoo.inputs(family)]
        slots = 4 * (16 if family == "mixtral" else 1)
        fxslots.reset(); torch.manual_seed(0)
        f = torch.compile(model, backend="fxslots", options={"slots": slots}, dynamic=False)
        with recording() as records:
            outs = [f(x) for x in xs]
            for o in outs:
                o.float().square().mean().backward()
        why = collections.Counter(); total = free = 0
        for rec in records:
            if rec.plan is None:
                continue
            lay = next(iter(rec.variant.layouts.values()))
            env = {s: v for s in rec.plan.capacity.free_symbols for name, v in lay.key if str(s) == name}
            for p in rec.plan.placements:
                if not p.write.owns_bytes:
                    continue
                nb = evaluate(p.nbytes, env)
                total += nb
                if p.write is Write.OUT:
                    free += nb
                else:
                    g = rec.saved.groups[p.group]
                    r = g.root
                    key = (p.write.value, (r.producer or r.name) if r else "no root", (("user-visible: " if g.user_visible else "") + str(r.why_not_out if r else g.source)))
                    why[key[0], key[1][:30] + " | " + key[2][:150]] += nb
        print(f"== {family} {dtype}: {free}/{total} = {free/max(total,1):.4f} copy-free; fallbacks {[r.fallback for r in records if r.fallback]}")
        for (w, reason), nb in why.most_common(8):
            print(f"   {nb:8d} B {w:8s} {reason}")
