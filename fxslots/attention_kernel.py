"""The Triton source of fxslots' attention forward (fxslots/attention.py imports it at the
first launch, so importing fxslots never imports Triton). A FlashAttention-2 forward: one
program per block of query rows of one (batch, head), an online softmax over blocks of keys
in the log2 domain, the output and the natural-log logsumexp stored through their strides."""

from __future__ import annotations

import triton
import triton.language as tl

LN2: tl.constexpr = tl.constexpr(0.6931471805599453)  # Triton reads only constexpr globals
LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)


@triton.jit
def _scores(q, K, Bias, rd, cols, rm, M, N, D, skn, skd, sbm, sbn, scale_log2,
            HAS_BIAS: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    """One block of scores, log2 domain: scale * q.k + bias, as the efficient kernel adds
    its bias after scaling; -inf where a key is past the end or (causal, top-left aligned as
    the efficient kernel's CausalFromTopLeft) after the query."""
    k = tl.load(K + cols[None, :] * skn + rd[:, None] * skd,
                mask=(cols[None, :] < N) & (rd[:, None] < D), other=0.0)
    s = tl.dot(q, k, input_precision=PRECISION) * scale_log2
    if HAS_BIAS:
        s += tl.load(Bias + rm[:, None] * sbm + cols[None, :] * sbn,
                     mask=(rm[:, None] < M) & (cols[None, :] < N), other=0.0).to(tl.float32) * LOG2E
    keep = cols[None, :] < N
    if CAUSAL:
        keep = keep & (rm[:, None] >= cols[None, :])
    return tl.where(keep, s, float("-inf"))


@triton.jit
def _accumulate(s, m_i, l_i, acc, V, cols, rv, N, DV, svn, svd, PRECISION: tl.constexpr):
    """The online softmax step: rescale what was summed to the new row maxima, add this block."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet
    p = tl.math.exp2(s - m_use[:, None])
    alpha = tl.math.exp2(m_i - m_use)
    v = tl.load(V + cols[:, None] * svn + rv[None, :] * svd,
                mask=(cols[:, None] < N) & (rv[None, :] < DV), other=0.0)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    return m_new, l_i * alpha + tl.sum(p, 1), acc


# Sequence lengths and strides change between shape variants: one compiled kernel serves them
# all, so a captured variant never compiles while its stream is capturing.
@triton.jit(do_not_specialize=[
    "sqb", "sqh", "sqm", "skb", "skh", "skn", "svb", "svh", "svn", "sob", "soh", "som",
    "slb", "slh", "slm", "sbb", "sbh", "sbm", "sbn", "H", "M", "N", "LM"])
def attention_forward(Q, K, V, O, L, Bias, scale_log2,
                      sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
                      sob, soh, som, sod, slb, slh, slm, sbb, sbh, sbm, sbn, H, M, N, D, DV, LM,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                      BLOCK_DV: tl.constexpr, HAS_BIAS: tl.constexpr, CAUSAL: tl.constexpr,
                      PRECISION: tl.constexpr):
    # (batch, head) on the grid's first axis, which takes 2**31 - 1 programs (the second takes
    # 65535); offsets in int64, since a batch of long sequences passes 2**31 elements.
    bh, pid = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    rm = pid * BLOCK_M + tl.arange(0, BLOCK_M).to(tl.int64)
    rd, rv = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    q = tl.load(Q + b * sqb + h * sqh + rm[:, None] * sqm + rd[None, :] * sqd,
                mask=(rm[:, None] < M) & (rd[None, :] < D), other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    if CAUSAL:  # no key past this block's last row is seen
        end = tl.minimum(N, (pid + 1) * BLOCK_M)
    else:
        end = N
    for start in range(0, end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N).to(tl.int64)
        s = _scores(q, K + b * skb + h * skh, Bias + b * sbb + h * sbh, rd, cols, rm, M, N, D,
                    skn, skd, sbm, sbn, scale_log2, HAS_BIAS, CAUSAL, PRECISION)
        m_i, l_i, acc = _accumulate(s, m_i, l_i, acc, V + b * svb + h * svh, cols, rv, N, DV,
                                    svn, svd, PRECISION)
    # A row whose every key is masked: 0, as the efficient kernel's epilogue (denominator 1
    # where the sum is 0), not 0/0; its logsumexp stays -inf, as there.
    tl.store(O + b * sob + h * soh + rm[:, None] * som + rv[None, :] * sod,
             (acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]).to(O.dtype.element_ty),
             mask=(rm[:, None] < M) & (rv[None, :] < DV))
    lse = tl.where(rm < M, (m_i + tl.math.log2(l_i)) * LN2, float("inf"))  # +inf: the padding
    tl.store(L + b * slb + h * slh + rm * slm, lse, mask=rm < LM)
