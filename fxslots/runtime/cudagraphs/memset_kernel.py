"""The kernel a memset node becomes (``memsets.py``), in PTX: the driver compiles it for the
device it is loaded on. One thread per element: element ``i`` of a ``width``-wide row layout
lies at ``dst + (i / width) * pitch + (i % width) * esize``; 1- and 2-byte elements store the
low bits of ``value``. Run 50 checked its bytes against the memsets it replaces (1-, 2-, 4-byte
and pitched) on an H100."""

PTX = r"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry fxslots_memset(.param .u64 p_dst, .param .u64 p_pitch, .param .u32 p_value,
                               .param .u32 p_esize, .param .u64 p_width, .param .u64 p_n)
{
  .reg .u64 %rd<12>;
  .reg .u32 %r<8>;
  .reg .u16 %rs<2>;
  .reg .pred %p<4>;
  ld.param.u64 %rd1, [p_dst];
  cvta.to.global.u64 %rd1, %rd1;
  ld.param.u64 %rd2, [p_pitch];
  ld.param.u32 %r1, [p_value];
  ld.param.u32 %r2, [p_esize];
  ld.param.u64 %rd3, [p_width];
  ld.param.u64 %rd4, [p_n];
  mov.u32 %r3, %ctaid.x;
  mov.u32 %r4, %ntid.x;
  mov.u32 %r5, %tid.x;
  mul.wide.u32 %rd5, %r3, %r4;
  cvt.u64.u32 %rd6, %r5;
  add.u64 %rd5, %rd5, %rd6;
  setp.ge.u64 %p1, %rd5, %rd4;
  @%p1 bra DONE;
  div.u64 %rd7, %rd5, %rd3;
  rem.u64 %rd8, %rd5, %rd3;
  cvt.u64.u32 %rd9, %r2;
  mul.lo.u64 %rd8, %rd8, %rd9;
  mad.lo.u64 %rd10, %rd7, %rd2, %rd8;
  add.u64 %rd10, %rd10, %rd1;
  cvt.u16.u32 %rs1, %r1;
  setp.eq.u32 %p2, %r2, 4;
  @%p2 bra E4;
  setp.eq.u32 %p3, %r2, 2;
  @%p3 bra E2;
  st.global.u8 [%rd10], %rs1;
  bra DONE;
E2:
  st.global.u16 [%rd10], %rs1;
  bra DONE;
E4:
  st.global.u32 [%rd10], %r1;
DONE:
  ret;
}
"""
