"""H200 run 22: which saved groups the zoo's Llama and T5 copy on CUDA, and why (explain()'s lines)."""
import sys, warnings
sys.path.insert(0, ".")
warnings.simplefilter("ignore")
import torch
from tests import zoo
import fxslots
for fam in ("llama", "t5"):
    m = zoo.build(fam, dropout=0.0).cuda()
    x = zoo.inputs(fam)[0].cuda()
    s = str(fxslots.explain(m, x))
    print("=====", fam)
    for l in s.splitlines():
        if " copied " in l or "copy-free would take" in l or l.startswith(("saved bytes", "bytes copied", "partitioned", "recomputed")):
            print(l[:300])
