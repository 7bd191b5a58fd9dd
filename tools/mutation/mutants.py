"""The mutants: one broken rule each, as a text substitution in one file of the package.

Each ``Mutant`` replaces ``old`` (which must occur exactly once in ``file``: the tool reports
"anchor not found" or "anchor not unique" as its own failure, never as a survivor) with ``new``.
``tests`` are the tests that ought to notice that rule broken; ``suite`` says where they run:
"cpu" (CI) or "cuda" (``pytest -m cuda`` on a GPU machine). Keep anchors short: other branches
edit these files, and a short anchor survives edits around it.

The first group is the issue's own list (rules that used to break unnoticed); then one or more
per invariant of DESIGN.md and docs/design.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str
    old: str
    new: str
    rule: str
    suite: str  # "cpu" or "cuda"
    tests: tuple[str, ...]


RING = "fxslots/runtime/ring.py"
SLOT = "fxslots/runtime/slot.py"
VARIANT = "fxslots/runtime/variant.py"
LAYOUT = "fxslots/runtime/layout.py"
REGION = "fxslots/runtime/region.py"
FEEDS = "fxslots/runtime/feeds.py"
STREAMS = "fxslots/streams.py"
OFFLOAD = "fxslots/passes/offload.py"
OFFLOADING = "fxslots/offloading.py"
COSTS = "fxslots/costs.py"
EXECUTOR = "fxslots/runtime/cudagraphs/executor.py"
POOL = "fxslots/runtime/cudagraphs/pool.py"
INFERENCE = "fxslots/runtime/cudagraphs/inference.py"
MEMSETS = "fxslots/runtime/cudagraphs/memsets.py"
MEMSET_KERNEL = "fxslots/runtime/cudagraphs/memset_kernel.py"
STAGING = "fxslots/runtime/cudagraphs/staging.py"
DELIVER = "fxslots/passes/deliver.py"
PLAN = "fxslots/passes/plan.py"
REWRITE = "fxslots/passes/rewrite.py"
VERIFY = "fxslots/passes/verify.py"
BACKEND = "fxslots/backend.py"
OPTIONS = "fxslots/options.py"
OVERLAY = "fxslots/overlay.py"
LIFETIMES = "fxslots/passes/lifetimes.py"
DELIVERY = "fxslots/runtime/cudagraphs/delivery.py"
BANKS = "fxslots/runtime/cudagraphs/banks.py"
STATE = "fxslots/state.py"
UNALIAS = "fxslots/passes/unalias.py"
POLICIES = "fxslots/policies.py"
KERNELS = "fxslots/kernels.py"
OUTPUTS = "fxslots/runtime/cudagraphs/outputs.py"
COLLECT = "fxslots/passes/collect.py"
PIPELINING = "fxslots/pipelining/__init__.py"
GRADS = "fxslots/grads.py"
RETYPE = "fxslots/passes/retype.py"
ACCUMULATE = "fxslots/passes/accumulate.py"
AUTOGRAD = "fxslots/_torch/autograd.py"

BAD = "tests/test_bad_inputs.py"
STAND_IN = "tests/test_graph_executor_cpu.py"

MUTANTS: tuple[Mutant, ...] = (
    # ------------------------------------------------------------ the issue's list
    Mutant("verify-checks-nothing", VERIFY,
           "    checks = _check_placed(fw, saved, plan, num_fwd_outputs)\n",
           "    return 0\n",
           "verify_forward checks the rewrite's postconditions", "cpu",
           ("tests/test_verify.py",)),
    Mutant("always-fall-back", BACKEND,
           "        if (reason := unplaceable_reason(saved)) is not None:",
           "        if (reason := 'mutant: every graph runs without slots') is not None:",
           "a graph fxslots can place uses slots (no silent fallback)", "cpu",
           ("tests/test_fuzz.py::test_grammar_coverage",
            "tests/test_fuzz.py::test_fuzz_schedules_match_aot_eager_bitwise")),
    Mutant("release-keeps-owner", RING,
           "slot.owner = slot.host_owner = None",
           "pass",
           "release() gives the slot back at once, whoever still holds views of it", "cpu",
           (f"{BAD}::test_exception_inside_the_backward",
            f"{BAD}::test_exception_half_way_through_forward")),
    Mutant("copied-views-ignore-storage-offset", PLAN,
           "member_byte_offset(offset, g.byte_start, m.storage_offset, m.dtype)",
           "member_byte_offset(offset, g.byte_start, g.byte_start // m.itemsize, m.dtype)",
           "a copied member's view sits at its own offset in the group", "cpu",
           ("tests/test_golden.py::test_aliasing_views_share_one_placement",)),
    # ------------------------------------------------------------ verify
    Mutant("verify-allows-overlap", VERIFY,
           "assert a + an <= b, f\"groups",
           "assert True, f\"groups",
           "verify_forward refuses overlapping groups", "cpu",
           ("tests/test_verify.py",)),
    Mutant("verify-allows-unplaced-output", VERIFY,
           "assert _in_slot(node, written), (",
           "assert True, (",
           "verify_forward refuses a saved tensor that does not leave through its slot", "cpu",
           ("tests/test_verify.py",)),
    # ------------------------------------------------------------ slot ownership
    Mutant("take-a-pending-slot", RING,
           "free = [s for s in self.slots if not s.pending() and not s.lent_out()]\n"
           "        if not free:\n            # A dropped",
           "free = list(self.slots)\n        if not free:\n            # A dropped",
           "a forward never takes a slot whose backward has not run", "cpu",
           (f"{BAD}::test_too_many_forwards_in_flight", "tests/test_runtime.py")),
    Mutant("owns-any-owned-slot", SLOT,
           "o is not None and cdata == o.cdata for o in",
           "o is not None for o in",
           "a backward finds the slot its own forward took", "cpu",
           ("tests/test_fuzz.py::test_grammar_coverage", "tests/test_runtime.py")),
    Mutant("no-lock-in-acquire", RING,
           "        with self._lock:\n            if not self.slots:",
           "        if True:\n            if not self.slots:",
           "threads sharing a model never take the same slot (acquire is atomic)", "cpu",
           ("tests/test_threads.py",)),
    Mutant("pending-never-expires", SLOT,
           "return (o is not None and not o.expired()) or (h is not None and not h.expired())",
           "return o is not None or h is not None",
           "a dropped microbatch's slot comes back when its views die", "cpu",
           ("tests/test_runtime.py", "tests/test_fuzz.py::test_grammar_coverage")),
    Mutant("no-collect-before-refusing", RING,
           "            gc.collect()\n",
           "            pass\n",
           "a slot held only by a garbage cycle (create_graph) is collected before refusing",
           "cpu", (f"{BAD}::test_create_graph_double_backward",)),
    Mutant("orphaned-slot-stays-pending", SLOT,
           "        return self.pending() and self.node is not None and "
           "_torch.saved_released(self.node)",
           "        return False",
           "a slot whose views outlived their autograd graph (compiled autograd's traces keep "
           "them) does not refuse the next forward", "cpu",
           ("tests/test_runtime.py::test_views_outliving_their_autograd_graph_keep_the_old_"
            "arenas_and_the_slot_takes_new",
            "tests/test_graph_executor_cpu.py::test_compiled_autograd_runs_the_backward_and_"
            "never_exhausts_the_slots")),
    Mutant("tokens-before-a-loop-backward", REGION,
           "        return self.ran_backward", "        return True",
           "a replayed forward hands tokens only once the loop ran a backward through fxslots "
           "(compiled autograd around the backward alone cannot read them)", "cpu",
           (f"{STAND_IN}::test_after_prepare_tokens_wait_for_a_backward_through_fxslots",
            f"{STAND_IN}::test_compiled_autograd_after_prepare")),
    Mutant("prepare-backward-counts-for-tokens", REGION,
           "        if not state.preparing:\n            self.ran_backward = True",
           "        self.ran_backward = True",
           "prepare's backwards do not show that the loop runs its backwards through fxslots",
           "cpu", (f"{STAND_IN}::test_after_prepare_tokens_wait_for_a_backward_through_fxslots",
                   f"{STAND_IN}::test_compiled_autograd_after_prepare")),
    Mutant("views-a-hook-kept-overwritten", RING,
           "            slot.kept = (slot.owner, slot.host_owner) if slot.watched else None",
           "            slot.kept = None",
           "saved views a saved-tensor hook kept past their backward are never written again",
           "cpu", (f"{STAND_IN}::test_saved_views_a_hook_keeps_are_never_written_again",)),
    Mutant("prepare-steps-the-optimizer-in-backward", "fxslots/_torch/autograd.py",
           "            hooks[key] = _no_hook", "            pass",
           "prepare runs no post-accumulate-grad hook (an optimizer step in backward)", "cpu",
           ("tests/test_prepare.py::test_prepare_mutes_optimizer_steps_in_backward",)),
    Mutant("absolute-reads-ignored", "fxslots/passes/absolute.py",
           "    found = [_check(n, p, fw_groups", "    return ()\n    found = [_check(n, p, fw_groups",
           "a read at absolute storage offsets never lands in a slot (synthetic bases)", "cpu",
           (f"{STAND_IN}::test_reads_at_absolute_storage_offsets_never_land_in_a_slot",)),
    Mutant("slots-shared-by-every-module", RING,
           "                s.params == params for s in self.slots if s.pending()) >= self.options.slots):",
           "                s.params == params for s in self.slots if s.pending()) >= 0):",
           "modules that share one compiled graph (torch.compile per block) each get 'slots' "
           "slots", "cpu",
           ("tests/test_runtime.py::test_slots_count_per_parameter_set",
            f"{STAND_IN}::test_blocks_compiled_one_by_one_take_slots_each")),
    Mutant("slots-grow-without-bound", RING,
           "                s.params == params for s in self.slots if s.pending()) >= self.options.slots):",
           "                s.params == params for s in self.slots if s.pending()) >= 10**9):",
           "a module's own forwards beyond 'slots' are refused, before anything is written",
           "cpu", ("tests/test_runtime.py::test_slots_count_per_parameter_set",
                   f"{BAD}::test_too_many_forwards_in_flight")),
    Mutant("reloaded-span-without-offsets", "fxslots/passes/lower_streams.py",
           "    return max(off + int(span_elements(size, stride)) for size, stride, off in spans)",
           "    return max(int(span_elements(size, stride)) for size, stride, off in spans)",
           "a reloaded span holds its members at their offsets (split views under Inductor)",
           "cpu", ("tests/test_inductor.py::test_an_offloaded_group_of_split_views_reloads_under_"
                   "inductor",)),
    Mutant("pinned-size-never-sampled", "fxslots/geometry.py",
           "        values = list(itertools.islice(allowed, 2))", "        values = []",
           "verify samples a size Dynamo's guards pin without making it a constant", "cpu",
           ("tests/test_geometry.py::test_guarded_samples_find_a_size_a_guard_pins",
            "tests/test_verify.py::test_verify_checks_a_size_a_guard_pins")),
    Mutant("relative-as-strided-refused", "fxslots/passes/absolute.py",
           '    return n.args[at] if len(n.args) > at else n.kwargs.get("storage_offset")',
           "    return 0",
           "an as_strided that gives no storage offset reads relative to its input: slots stay",
           "cpu", (f"{STAND_IN}::test_as_strided_at_an_offset_of_a_saved_activation",)),
    Mutant("debug-poisons-views-a-hook-kept", RING,
           "            if self.options.debug and not slot.watched:",
           "            if self.options.debug and True:",
           "debug mode never poisons a slot whose views a saved-tensor hook may keep", "cpu",
           (f"{STAND_IN}::test_saved_views_a_hook_keeps_are_never_written_again",)),
    Mutant("arena-group-grows-past-its-plan", RING,
           "        if (self.options.arena_group is not None or sum(",
           "        if (False or sum(",
           "a pipeline rank's arena group keeps to the slots its plan counted", "cpu",
           ("tests/test_pipeline_schedules.py::test_one_shared_slot_fewer_runs_out",)),
    Mutant("forward-forgets-its-node", VARIANT,
           "lay.host_nbytes, params, _torch.calling_node())",
           "lay.host_nbytes, params, None)",
           "a slot knows its forward's autograd node (to tell when that let go of its views)",
           "cpu", ("tests/test_graph_executor_cpu.py::test_compiled_autograd_runs_the_backward_"
                   "and_never_exhausts_the_slots",)),
    Mutant("disowned-arena-freed", RING,
           "                state.keep_while_viewed(arena, owner)",
           "                pass",
           "the old arenas of a disowned slot live as long as the views that outlived "
           "their autograd graph", "cpu",
           ("tests/test_runtime.py::test_views_outliving_their_autograd_graph_keep_the_old_"
            "arenas_and_the_slot_takes_new",)),
    Mutant("freed-saved-tensors-still-held", "fxslots/_torch/autograd.py",
           "    except RuntimeError:  # \"Trying to backward through the graph a second time\"\n"
           "        return True",
           "    except RuntimeError:  # \"Trying to backward through the graph a second time\"\n"
           "        return False",
           "a backward that freed its node's saved tensors counts as their release", "cpu",
           ("tests/test_runtime.py::test_views_outliving_their_autograd_graph_keep_the_old_"
            "arenas_and_the_slot_takes_new",)),
    # ------------------------------------------------------------ release
    Mutant("forward-exception-keeps-slot", VARIANT,
           "        except BaseException:\n            self.ring.release(slot)\n",
           "        except BaseException:\n            pass\n",
           "a forward that raises gives its slot back", "cpu",
           (f"{BAD}::test_exception_half_way_through_forward",)),
    Mutant("backward-never-releases", VARIANT,
           "if slot is not None and not _torch.keep_graph():",
           "if False:",
           "a backward (without retain_graph) gives its slot back", "cpu",
           (f"{BAD}::test_exception_inside_the_backward",
            f"{BAD}::test_backward_of_output_whose_slot_was_reused")),
    # ------------------------------------------------------------ offsets and arena size
    Mutant("arena-grows-too-little", RING,
           "self._grow(slot, nbytes, variant, evicted=",
           "self._grow(slot, nbytes // 2, variant, evicted=",
           "an arena holds the largest variant that uses it", "cpu",
           (f"{BAD}::test_variant_beyond_dynamic_bound_recompiles_and_grows",
            "tests/test_backend.py::test_variants_share_one_ring_sized_by_the_largest")),
    Mutant("view-runs-ignore-spacing", LAYOUT,
           "if same and r[5] > 1 and off == r[1] + r[4] * r[5]:",
           "if same and r[5] > 1:",
           "views are built at their planned offsets (batched runs)", "cpu",
           ("tests/test_runtime.py::test_make_views_equals_one_set_per_view_with_runs_grouped",
            "tests/test_golden.py")),
    Mutant("arena-limit-unchecked", RING,
           "if limit is not None and nbytes > limit:",
           "if False:",
           "a variant over max_arena_bytes is refused before anything is written", "cpu",
           (f"{BAD}::test_variant_beyond_arena_bound", "tests/test_runtime.py")),
    Mutant("variants-do-not-share-a-ring", REGION,
           "key = (frame, id(raw_options), opts)",
           "key = (frame, id(raw_options), opts, len(state.regions))",
           "variants of one frame share one ring, sized by the largest", "cpu",
           ("tests/test_backend.py::test_variants_share_one_ring_sized_by_the_largest",)),
    # ------------------------------------------------------------ copy placement
    Mutant("user-output-written-in-place", PLAN,
           "    if g.user_visible and not writes.outputs_copied:\n        return Write.COPY",
           "    if False:\n        return Write.COPY",
           "without CUDA graphs, a group a user output shares is copied into the slot",
           "cpu", (f"{BAD}::test_backward_of_output_whose_slot_was_reused",
                   "tests/test_golden.py::test_in_place_update_of_an_input")),
    Mutant("copy-returns-the-original", REWRITE,
           "            outs[i] = replace[n.name]",
           "            outs[i] = n",
           "a copied group leaves the forward through its slot view", "cpu",
           ("tests/test_golden.py::test_aliasing_views_share_one_placement",
            "tests/test_verify.py")),
    Mutant("stride-zero-copied-whole", REWRITE,
           "            if st == 0:\n",
           "            if False:\n",
           "an expanded (stride-0) member is copied once, not into overlapping bytes", "cpu",
           ("tests/test_golden.py::test_a_stride_zero_member_is_copied_one_slice",)),
    # ------------------------------------------------------------ staging and write-back
    Mutant("replay-skips-staging", EXECUTOR,
           "        copy_staged(cap.stage, args)\n        cap.graph.replay()",
           "        cap.graph.replay()",
           "a replay first copies the caller's inputs into the slot's staging", "cpu",
           (f"{STAND_IN}::test_executor_matches_aot_eager",)),
    Mutant("backward-skips-tangent-staging", BANKS,
           "        _torch.foreach_copy_(views, [args[i] for i in tangents])",
           "        pass",
           "a backward replay reads this call's tangents from where they were staged", "cpu",
           (f"{STAND_IN}::test_executor_matches_aot_eager",)),
    Mutant("replayed-user-output-left-in-slot", "fxslots/runtime/cudagraphs/outputs.py",
           "        if j < copied and kind in (OutKind.SLOT, OutKind.HOST):",
           "        if False:",
           "a replay copies a user output the plan wrote in the slot out for the caller", "cpu",
           (f"{STAND_IN}::test_a_saved_user_output_is_written_in_the_slot_and_copied_out_once",)),
    Mutant("uncaptured-user-output-left-in-slot", "fxslots/runtime/cudagraphs/outputs.py",
           "        if isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr() in ptrs:",
           "        if False:",
           "an uncaptured forward copies a user output in the slot out for the caller", "cpu",
           (f"{STAND_IN}::test_a_saved_user_output_is_written_in_the_slot_and_copied_out_once",)),
    Mutant("prepare-in-flight-runs-every-slot", "fxslots/prepare.py",
           "    groups = [calls] if in_flight else [[args] * slots for args in calls]",
           "    groups = [[args] * slots for args in calls]",
           "prepare(in_flight=True) runs each microbatch on the slot it takes in training only",
           "cpu", ("tests/test_prepare.py::"
                   "test_prepare_in_flight_sizes_each_slot_for_its_own_microbatch",)),
    Mutant("replay-skips-write-back", EXECUTOR,
           "        write_back(args, cap.writeback)\n",
           "        pass\n",
           "an input the graph mutates in its staged copy is written back to the caller", "cpu",
           (f"{STAND_IN}::test_mutated_staged_input_reaches_the_caller",)),
    Mutant("replay-ignores-moved-input", "fxslots/runtime/cudagraphs/outputs.py",
           "        if [args[i].data_ptr() for i in indices] == ptrs:",
           "        if True:",
           "a graph is not replayed once an input it points at moved", "cpu",
           (f"{STAND_IN}::test_a_moved_parameter_is_captured_again",
            "tests/test_accumulate.py::test_replaced_buffers_are_never_written_stale")),
    # ------------------------------------------------------------ graph invalidation
    Mutant("growth-keeps-stale-graphs", EXECUTOR,
           "self._drop(lambda k: k.slot == slot)",
           "pass",
           "a slot whose arena grows drops every graph that pointed into it", "cpu",
           (f"{STAND_IN}::test_a_bigger_variant_drops_the_graphs_of_the_slot_it_grows",)),
    Mutant("growth-keeps-generation", RING,
           "slot.generation += 1",
           "slot.generation += 0",
           "an arena that moves gets a new generation (capture keys go stale)", "cpu",
           ("tests/test_runtime.py::test_arena_grows_for_a_bigger_variant_and_respects_the_limit",
            f"{STAND_IN}::test_a_bigger_variant_drops_the_graphs_of_the_slot_it_grows")),
    Mutant("model-death-keeps-arenas", REGION,
           "            if not self._anchors:\n                self.free()",
           "            if not self._anchors:\n                pass",
           "a model's arenas are freed when the model dies", "cpu",
           ("tests/test_runtime.py::test_deleting_the_model_frees_its_arenas",)),
    # ------------------------------------------------------------ debug mode
    Mutant("debug-release-does-not-poison", RING,
           "                poison(slot)", "                pass",
           "debug mode poisons a released arena", "cpu",
           (f"{BAD}::test_debug_env_var_poisons_released_arenas",
            "tests/test_runtime.py::test_debug_release_poisons_the_arena")),
    Mutant("debug-poison-is-zero", "fxslots/runtime/alloc.py",
           "arena.fill_(0xFF)",
           "arena.fill_(0)",
           "the poison reads as NaN in every float format", "cpu",
           ("tests/test_runtime.py::test_debug_release_poisons_the_arena",)),
    Mutant("debug-replay-skips-owner-check", SLOT,
           "        if not self.pending():\n            raise CaptureError(",
           "        if False:\n            raise CaptureError(",
           "debug mode refuses to replay into a slot no live microbatch holds", "cpu",
           (f"{STAND_IN}::test_debug_refuses_a_replay_into_a_slot_nobody_holds",)),
    # ------------------------------------------------------------ offload reload
    Mutant("reload-ignores-group-start", STREAMS,
           "m.storage_offset() - lo) for m in members]",
           "m.storage_offset()) for m in members]",
           "a reloaded member keeps its offset within its group", "cpu",
           ("tests/test_numerics.py::test_offloaded_groups_reload_bitwise",)),
    Mutant("backward-reads-the-host-arena", OFFLOAD,
           "            if user is not handle:\n                user.replace_input_with(m, v)",
           "            if user is not handle:\n                pass",
           "offloaded groups are reloaded to the device before backward reads them", "cpu",
           ("tests/test_offload.py::test_graphs_copy_on_side_streams_and_join_before_use",)),
    # ------------------------------------------------------------ options
    Mutant("slots-unbounded", OPTIONS,
           "if not 1 <= o.slots <= MAX_SLOTS:",
           "if not 1 <= o.slots:",
           "'slots' has a documented upper bound", "cpu",
           (f"{BAD}::test_unknown_or_bad_option",)),
    Mutant("alignment-unbounded", OPTIONS,
           "a & (a - 1) or a > MAX_ALIGNMENT:",
           "a & (a - 1):",
           "'alignment' has a documented upper bound", "cpu",
           (f"{BAD}::test_unknown_or_bad_option",)),
    Mutant("link-bandwidth-unbounded", OPTIONS,
           "    if link is not None and not 0 < link < math.inf:",
           "    if False:",
           "'link_bandwidth' is a positive, finite number of bytes per second", "cpu",
           (f"{BAD}::test_unknown_or_bad_option",)),
    Mutant("non-mapping-options-accepted", OPTIONS,
           "if options is not None and not isinstance(options, Mapping):",
           "if False:",
           "options that are not a mapping are an OptionsError", "cpu",
           (f"{BAD}::test_unknown_or_bad_option",)),
    Mutant("bad-option-raised-while-compiling", BACKEND,
           "        return refusing(e)",
           "        raise",
           "a bad option raises what `except fxslots.OptionsError` catches", "cpu",
           (f"{BAD}::test_unknown_or_bad_option", "tests/test_backend.py")),
    Mutant("arena-group-not-shared", REGION,
           "= _joined(opts) or Region.new(name, opts)",
           "= Region.new(name, opts)",
           "regions of one arena group share one ring (a pipeline rank's stages)", "cpu",
           ("tests/test_pipeline_schedules.py::test_one_shared_slot_fewer_runs_out",
            "tests/test_pipeline_schedules.py::test_measured_arena_bytes_are_the_plans")),
    Mutant("saved-tensors-donated", BACKEND,
           "        _torch.declare_no_donated_buffers()\n",
           "        pass\n",
           "fxslots donates no saved tensor to its backward (retain_graph, create_graph run)",
           "cpu", (f"{BAD}::test_create_graph_after_a_plain_backward",)),
    Mutant("held-gradients-overwritten", STAGING,
           "        retired = self.kept()",
           "        retired = False",
           "a backward never writes gradients into memory the caller still holds", "cpu",
           ("tests/test_deliver.py::test_gradients_the_caller_keeps_are_never_overwritten",)),
    Mutant("gradients-never-delivered", DELIVER,
           "            if i < len(outs) and _fits(outs[i], device, nodes, 0)]",
           "            if False]",
           "a captured backward writes its gradients into the output buffer itself", "cpu",
           ("tests/test_deliver.py::test_captured_backward_delivers_gradients_bitwise",)),
    Mutant("held-outputs-overwritten", STAGING,
           "        free = next((b for b in self.banks if not b.kept()), None)",
           "        free = self.banks[0]",
           "a forward never writes its outputs into memory the caller still holds", "cpu",
           ("tests/test_deliver_forward.py::test_outputs_the_caller_keeps_are_never_overwritten",)),
    Mutant("outputs-never-delivered", DELIVER,
           "            and _base(o).op == \"call_function\" and not _writes(_base(o))]",
           "            and False]",
           "a captured forward writes its large outputs into its slot's output buffer itself",
           "cpu", ("tests/test_deliver_forward.py::"
                   "test_captured_forward_delivers_its_outputs_bitwise",)),
    Mutant("forward-outputs-tokened", "fxslots/runtime/cudagraphs/outputs.py",
           "            if tokens and kind in (OutKind.SLOT, OutKind.HOST):  # the saved ones",
           "            if tokens:  # the saved ones",
           "only saved outputs go to autograd as arena tokens: a delivered output is a view",
           "cpu", ("tests/test_deliver_forward.py::"
                   "test_captured_forward_delivers_its_outputs_bitwise",)),
    Mutant("generations-per-buffer", STAGING,
           "            self.generation = next(_generations)",
           "            self.generation += 1",
           "output buffer generations are unique across buffers: a moved gradient buffer drops "
           "the backwards that wrote it, not the forwards", "cpu",
           ("tests/test_deliver_forward.py::"
            "test_a_moved_gradient_buffer_leaves_the_forward_graphs",)),
    Mutant("one-output-buffer-per-slot", STAGING,
           "        free = next((b for b in self.banks if not b.kept()), None)",
           "        free = None if self.banks[0].kept() else self.banks[0]",
           "a forward whose last output the caller still holds delivers into the slot's other "
           "buffer", "cpu", ("tests/test_deliver_forward.py::"
                             "test_the_output_held_until_the_next_forward_returns_alternates_two_buffers",)),
    Mutant("moved-buffer-drops-the-other-bank", STAGING,
           "    drop(lambda k: old in (k.delivers, k.tangents_in))",
           "    drop(lambda k: k.direction.value == \"forward\" and k.delivers not in (-1, old))",
           "a moved output buffer drops the graphs that wrote it, not those of the slot's other",
           "cpu", ("tests/test_deliver_forward.py::"
                   "test_the_output_held_until_the_next_forward_returns_alternates_two_buffers",)),
    Mutant("hook-copies-crash-the-backward", RING,
           "        if not any(s.contains(saved) for s in self.slots):\n            return None\n",
           "",
           "a backward whose saved tensors a pack hook copied reads the copies, not a slot",
           "cpu", ("tests/test_graph_executor_cpu.py::"
                   "test_a_pack_hook_that_copies_saved_tensors_backs_its_own_copies[1]",)),
    Mutant("one-pass-adds-in-each-backward", FEEDS,
           "                       and _torch.runs_in_this_backward(node)\n",
           "                       and False\n",
           "two backwards of one backward pass feeding the same .grad leave the add to autograd",
           "cpu", ("tests/test_accumulate.py::"
                   "test_two_backwards_of_one_pass_leave_accumulation_to_autograd[nested]",)),
    Mutant("own-node-counted", FEEDS,
           "        return not any(params in related and node is not me\n",
           "        return not any(params in related\n",
           "a backward does not count its own forward as another one of its pass", "cpu",
           ("tests/test_accumulate.py::"
            "test_two_backwards_of_one_pass_leave_accumulation_to_autograd[summed]",)),
    Mutant("forward-nodes-keyed-by-address", FEEDS,
           "        key = (id(refs[0]()), id(refs[-1]())) if refs else None\n",
           "        key = (refs[0]().data_ptr(), refs[-1]().data_ptr()) if refs else None\n",
           "two forwards of one pass count as the same parameters by the parameters' identity, "
           "whatever .data = did to their address between them", "cpu",
           ("tests/test_accumulate.py::"
            "test_two_backwards_of_one_pass_leave_accumulation_to_autograd",)),
    Mutant("parameters-noted-once-per-variant", REGION,
           "        if key in self.param_sets and self._noted(args[indices[0]]):\n",
           "        if self.param_sets:\n",
           "a variant notes each parameter set it runs with, not only its first", "cpu",
           ("tests/test_accumulate.py::"
            "test_a_graph_that_ran_with_other_parameters_notes_the_new_ones",)),
    Mutant("captures-keyed-without-parameters", EXECUTOR,
           "                         delivers=generation, params=slot.params)",
           "                         delivers=generation, params=0)",
           "one compiled graph serving several parameter sets (a rank's pipeline chunks) keeps "
           "a capture per set", "cpu",
           ("tests/test_pipeline_schedules.py::test_a_steady_pipeline_captures_nothing",)),
    Mutant("failing-twin-crashes", "fxslots/fallback.py",
           "        go_without(f\"{what}: {failure_reason(e)}; {instead}\", strict)",
           "        raise",
           "a backward twin's pass failing on an unforeseen graph falls back with a warning",
           "cpu", ("tests/test_deliver.py::test_a_failing_delivery_pass_falls_back_with_a_warning",)),
    Mutant("aliased-members-reloaded-apart", "fxslots/passes/lower_streams.py",
           "    spans = _spans(vals) if len(members) > 1 else None",
           "    spans = None",
           "members of one offloaded group that share bytes reach Inductor as views of one "
           "reloaded buffer (apart, it may reuse one's bytes while the other is read)", "cpu",
           ("tests/test_inductor.py::"
            "test_members_of_one_reloaded_group_alias_in_inductors_code",)),
    Mutant("tokens-not-rebuilt", EXECUTOR,
           "            saved_views(variant.saved_backward_args, slot.saved_outs, gargs)",
           "            pass",
           "a backward that cannot replay after a forward handed out arena tokens runs on the "
           "views they stand for", "cpu",
           ("tests/test_graph_executor_cpu.py::"
            "test_a_backward_that_cannot_replay_after_a_token_forward_rebuilds_the_views",)),
    Mutant("tokens-under-saved-tensor-hooks", EXECUTOR,
           "            tokens = (cap.tokens_for(variant.saved_backward_args) and not slot.watched",
           "            tokens = (cap.tokens_for(variant.saved_backward_args)",
           "saved-tensor hooks see the saved views, never an arena token", "cpu",
           ("tests/test_graph_executor_cpu.py::test_saved_tensor_hooks_see_real_views",)),
    Mutant("uncapturable-backward-captured", BACKEND,
           "            variant.executor.capturing = False  # before any backward ran",
           "            pass  # before any backward ran",
           "a variant whose backward cannot be a CUDA graph runs uncaptured in both directions",
           "cpu", ("tests/test_graph_executor_cpu.py::"
                   "test_an_uncapturable_backward_runs_both_directions_uncaptured",)),
    Mutant("rng-state-captured", BACKEND,
           "        if graphs and (why := uncapturable_reason(saved, fw, device, static)) is not None:",
           "        if False and (why := uncapturable_reason(saved, fw, device, static)) is not None:",
           "a forward that saves a checkpointed op's RNG state is not captured as a CUDA graph "
           "(a replay would hand backward the state read at capture)", "cpu",
           ("tests/test_zoo.py::test_checkpointed_random_op_runs_without_cuda_graphs",)),
    # ------------------------------------------------------------ Inductor kernels
    Mutant("inductor-extern-op-copied", "fxslots/passes/lower.py",
           "            if functional is None or extern(functional):\n",
           "            if functional is None:\n",
           "an op Inductor runs as an ATen call writes its slot itself, with no copy", "cpu",
           ("tests/test_inductor.py::test_kernels_write_saved_values_into_the_slots",)),
    Mutant("inductor-readers-skip-the-slot-store", "fxslots/passes/lower.py",
           "    node.replace_all_uses_with(copy, delete_user_cb=lambda user: user is not copy)",
           "    pass",
           "a generated kernel computes a saved value once, in the kernel that stores it", "cpu",
           ("tests/test_inductor.py::test_kernels_write_saved_values_into_the_slots",
            "tests/test_inductor.py::test_matches_torch_compile_default_bitwise")),
    Mutant("inductor-plan-copy-read-from-value", "fxslots/passes/lower.py",
           "            _read_from_slot(node)\n",
           "            pass\n",
           "a value the plan copies into its slot is read from the slot, so its kernel stores "
           "it once", "cpu",
           ("tests/test_inductor.py::test_a_value_the_plan_copies_is_stored_from_its_kernel",)),
    Mutant("audit-reads-param-type", "fxslots/passes/audit.py",
           "    return words[-1] if words else None",
           "    return words[0] if words else None",
           "the audit binds a C++ kernel's parameters by name, so a bf16 kernel's slot store "
           "is found", "cpu",
           ("tests/test_inductor.py::test_a_value_the_plan_copies_is_stored_from_its_kernel",)),
    Mutant("embedding-expansion-given-to-inductor", "fxslots/passes/lower.py",
           "        elif _slot_view(slot) is None and (base := _viewed_slot(slot)) is not None:",
           "        elif False:",
           "an expansion whose out= is a view of the slot reaches Inductor as the op it "
           "expanded", "cpu",
           ("tests/test_inductor.py::test_matches_torch_compile_default_bitwise",)),
    Mutant("host-scalar-of-literals-uncaptured", "fxslots/capturable.py",
           "                n.op == \"call_function\" and all(",
           "                False and all(",
           "a 0-dim host value made of literals (where(c, x, 0.0)) does not stop a capture",
           "cpu", ("tests/test_capturable.py::test_a_host_scalar_made_of_literals_is_fine",)),
    Mutant("inductor-layout-optimization-on", "fxslots/_torch/inductor.py",
           '"triton.cudagraphs": False, "layout_optimization": False}',
           '"triton.cudagraphs": False}',
           "Inductor keeps the layouts the slots fix (no channels-last buffers for saved "
           "values of a conv net)", "cpu",
           ("tests/test_inductor.py::test_matches_torch_compile_default_bitwise",)),
    Mutant("custom-out-variant-not-lowered", "fxslots/passes/lower.py",
           "            if functional is None or extern(functional):",
           "            if functional is not None and extern(functional):",
           "an out-variant with no functional form (transformers' grouped MoE matmul) reaches "
           "Inductor as an op that writes its slot", "cpu",
           ("tests/test_zoo.py::test_mixtral_with_inductor_kernels_writes_its_grouped_matmul_"
            "in_place",)),
    Mutant("tracing-failure-crashes", BACKEND,
           "    except Exception as e:  # noqa: BLE001 - fxslots' tracing never stops the user's "
           "training\n",
           "    except ZeroDivisionError as e:  # mutant\n",
           "a failure while tracing with fxslots' settings falls back to a plain trace",
           "cpu", ("tests/test_fallback.py::test_a_failure_while_tracing_falls_back_and_trains_"
                   "as_aot_eager",)),
    # ------------------------------------------------------------ gradient accumulation
    Mutant("accumulate-despite-hooks", "fxslots/_torch/autograd.py",
           "if g.requires_grad or p._backward_hooks or getattr(",
           "if g.requires_grad or getattr(",
           "a parameter with a hook gets its gradient through autograd, where the hook sees it",
           "cpu", ("tests/test_accumulate.py::test_hooks_take_the_plain_backward",)),
    Mutant("shared-parameter-accumulated-in-graph", FEEDS,
           "        if self._feeds_a_shared_parameter(refs) and self._shared_in_this_backward(",
           "        if False and self._shared_in_this_backward(",
           "a parameter two regions feed is accumulated by autograd (sum, then one add)", "cpu",
           ("tests/test_accumulate.py::"
            "test_a_parameter_two_regions_feed_is_accumulated_by_autograd",)),
    Mutant("accumulated-gradients-also-returned", "fxslots/passes/accumulate.py",
           "    for i in outputs:\n        outs[i] = None",
           "    for i in outputs:\n        pass",
           "a gradient added in the graph is not handed to autograd to add again", "cpu",
           ("tests/test_accumulate.py::test_accumulation_in_the_graph_is_bitwise_eager",)),
    Mutant("import-registers-the-backend", "fxslots/__init__.py",
           "counters = state.counters\n",
           "from torch._dynamo import register_backend as _register  # noqa: E402\n"
           "from .backend import fxslots_backend as _backend  # noqa: E402\n"
           "_register(name='fxslots')(_backend)\n"
           "counters = state.counters\n",
           "importing fxslots registers nothing: the entry point finds the backend", "cpu",
           ("tests/test_backend.py::test_importing_fxslots_registers_nothing",)),
    # ------------------------------------------------------------ GPU only
    # ------------------------------------------------------------ gradients in the arena
    Mutant("grad-written-over-bytes-still-read", OVERLAY,
           "if f <= r and w <= last]",
           "if f <= r and w < last]",
           "a gradient takes only bytes whose last reader ran before the node that writes it",
           "cpu", ("tests/test_overlay.py::"
                   "test_a_gradient_takes_bytes_read_before_it_is_written_and_no_others",)),
    Mutant("lifetimes-ignore-views", LIFETIMES,
           "if user not in seen and user.op != \"output\" and _shares(user, v):",
           "if False:",
           "a saved tensor is read as long as any view of it is", "cpu",
           ("tests/test_overlay.py::"
            "test_a_view_read_later_keeps_its_base_alive_and_a_returned_value_lives_to_the_end",)),
    Mutant("lifetimes-trust-unsafe-view-schema", LIFETIMES,
           "return _torch.returns_view(user.target) or _aliases(user, arg)",
           "return _aliases(user, arg)",
           "_unsafe_view's result shares its input's bytes, whatever its schema says", "cpu",
           ("tests/test_borrow.py::test_a_value_is_read_as_long_as_its_unsafe_view_is",)),
    Mutant("temporary-busy-only-where-computed", OVERLAY,
           "busy.append((hole, hole + nbytes, w, r))",
           "busy.append((hole, hole + nbytes, w, w))",
           "a temporary's bytes are busy from the node that computes it through the node that "
           "reads it last", "cpu",
           ("tests/test_borrow.py::"
            "test_a_temporary_takes_bytes_last_read_before_its_node_and_gives_them_back",)),
    Mutant("borrowed-view-left-unwritten", "fxslots/passes/borrow.py",
           "            _write_into(graph, node, _out_op(node, None, symbolic=True), view, False)\n",
           "",
           "a borrowed temporary is computed into its arena view, not beside it", "cpu",
           ("tests/test_borrow.py::"
            "test_the_twin_computes_each_temporary_into_its_view_and_its_values_are_the_same",)),
    Mutant("reinplace-over-bytes-read-later", "fxslots/passes/borrow.py",
           "if g is None or g in taken or done[g] != i or not same_geometry(",
           "if g is None or g in taken or not same_geometry(",
           "a pointwise result goes over a saved input only where nothing reads that input's "
           "storage group after it", "cpu",
           ("tests/test_borrow.py::test_a_pointwise_op_goes_over_a_saved_input_only_when_nothing_reads_it_after",
            "tests/test_zoo.py::test_zoo_temporaries_in_the_arena_bitwise")),
    Mutant("reinplace-beside-a-view-it-reads", "fxslots/passes/borrow.py",
           "if any(b in near and b is not x for b in n.all_input_nodes):",
           "if False:",
           "a pointwise result never goes over a saved input while the op reads other bytes of "
           "that storage", "cpu",
           ("tests/test_borrow.py::test_a_pointwise_op_goes_over_a_saved_input_only_when_nothing_reads_it_after",)),
    Mutant("reinplace-a-returned-result", "fxslots/passes/borrow.py",
           "        if read == END:\n            continue\n",
           "",
           "a result the backward returns never goes over slot bytes (the next forward's)",
           "cpu", ("tests/test_borrow.py::test_a_pointwise_op_goes_over_a_saved_input_only_when_nothing_reads_it_after",)),
    Mutant("rowwise-over-any-dimension", "fxslots/rowwise.py",
           "if value.dim() == 0 or dim % value.dim() != value.dim() - 1:",
           "if value.dim() == 0:",
           "a softmax backward goes over its saved output, and a log-softmax over its input, "
           "only along their last dimension, where their kernels read a row before they write "
           "it", "cpu",
           ("tests/test_borrow.py::test_a_softmax_backward_goes_over_its_saved_output_along_rows_only",
            "tests/test_share.py::"
            "test_an_input_stays_in_the_pool_where_the_log_softmax_could_not_write_over_it")),
    Mutant("rowwise-kernels-unchecked", "fxslots/passes/borrow.py",
           "    return rowwise.along_rows(n.target, v, n.kwargs[\"dim\"] if \"dim\" in n.kwargs else n.args[2])",
           "    return True",
           "a softmax backward goes over its saved output only where this torch's kernel gives "
           "the same bits there as beside it", "cpu",
           ("tests/test_borrow.py::"
            "test_a_softmax_backward_stays_beside_its_output_where_this_torch_gives_other_bits",)),
    Mutant("same-bits-compares-nothing", "fxslots/rowwise.py",
           "    return torch.equal(run(inputs, inputs[over]), want)",
           "    return run(inputs, inputs[over]) is not None",
           "the kernel check compares the result written over the output with one written "
           "beside it", "cpu",
           ("tests/test_borrow.py::"
            "test_a_kernel_that_writes_a_row_before_it_has_read_it_fails_the_check",)),
    Mutant("room-by-the-pooling-backward", "fxslots/runtime/cudagraphs/room.py",
           "        return variant.runner(Direction.BACKWARD, deliver=BORROWS)\n",
           "        return variant.runner(Direction.BACKWARD, deliver=True)\n",
           "the pool's room is sized by the backward a warm loop captures (temporaries in the "
           "slot's arena), not one that holds them in the pool", "cpu",
           ("tests/test_pool_room.py::"
            "test_the_room_is_the_most_bytes_a_graph_holds_at_once_and_a_workspace",)),
    Mutant("room-by-the-pooling-forward", "fxslots/runtime/cudagraphs/room.py",
           "deliver=v.deliver_forward is not None)),",
           "deliver=False)),",
           "the pool's room is sized by the forward that writes its outputs into the slot's "
           "buffer where it has one", "cpu",
           ("tests/test_pool_room.py::"
            "test_the_room_is_the_most_bytes_a_graph_holds_at_once_and_a_workspace",)),
    Mutant("room-for-one-variant", "fxslots/runtime/cudagraphs/executor.py",
           "room_for(self.region.live_variants()))",
           "room_for(self.region.live_variants()[:1]))",
           "one room serves all of a model's variants known at the first capture", "cpu",
           ("tests/test_pool_room.py::"
            "test_each_capture_asks_for_the_room_of_the_graphs_a_warm_loop_runs",)),
    Mutant("room-at-shape-hints", "fxslots/runtime/cudagraphs/room.py",
           "    return [lay.values for lay in variant.layouts.values() if lay.values] or [None]\n",
           "    return [None]\n",
           "a variant of symbolic sizes has its room sized at the largest shape it has run at, "
           "not at the shape it was compiled at", "cpu",
           ("tests/test_pool_room.py::"
            "test_a_dynamic_variants_room_is_sized_at_the_largest_shape_it_has_run_at",)),
    Mutant("pool-room-option-ignored", "fxslots/runtime/cudagraphs/room.py",
           "                 if v.ring.options.pool_room for what, g in (\n",
           "                 for what, g in (\n",
           "options={'pool_room': False} makes no room", "cpu",
           ("tests/test_pool_room.py::test_pool_room_false_asks_for_no_room",)),
    Mutant("room-never-made", POOL,
           "            torch.empty(nbytes, dtype=torch.uint8, device=device)\n",
           "            pass\n",
           "the pool's room is a segment made before the first capture's blocks", "cuda",
           ("tests/test_cuda.py::"
            "test_cuda_the_forward_and_backward_cut_their_blocks_from_one_segment",)),
    Mutant("share-an-input-read-again", "fxslots/passes/share.py",
           'x.op != "call_function" or len(x.users) != 1:',
           'x.op != "call_function":',
           "a log-softmax's input is computed in its slot view only where nothing else reads it",
           "cpu", ("tests/test_share.py::"
                   "test_an_input_stays_in_the_pool_where_the_log_softmax_could_not_write_over_it",)),
    Mutant("share-unchecked", "fxslots/passes/share.py",
           "            and rowwise.along_rows(aten._log_softmax.default, v, n.args[1]))",
           ")",
           "a log-softmax is computed over its input only where this torch's kernel gives the "
           "same bits there", "cpu",
           ("tests/test_share.py::test_an_input_stays_in_the_pool_where_this_torch_gives_other_bits",)),
    Mutant("reinplace-not-through-detach", "fxslots/passes/borrow.py",
           "            a = _whole_of(x)\n",
           "            a = x\n",
           "a saved tensor the backward reads through a detach is still its saved input (the "
           "loss head's log-probabilities)", "cpu",
           ("tests/test_borrow.py::test_a_softmax_backward_goes_over_its_saved_output_along_rows_only",)),
    Mutant("borrow-at-static-shapes-only", "fxslots/in_arena.py",
           "    if not plan.capacity.free_symbols <= set(hints):\n",
           "    if plan.capacity.free_symbols:\n",
           "a variant of symbolic sizes computes its backward's temporaries in the arena too, "
           "placed again at each shape", "cpu",
           ("tests/test_borrow.py::"
            "test_a_dynamic_variant_computes_temporaries_in_the_arena_at_every_shape",
            "tests/test_borrow.py::"
            "test_golden_a_dynamic_loss_heads_softmax_backward_goes_over_its_output")),
    Mutant("placement-kept-across-shapes", "fxslots/runtime/cudagraphs/delivery.py",
           "        key = (slot.layout.key, slot.nbytes)\n",
           "        key = (slot.nbytes,)\n",
           "gradients and temporaries of a variant of symbolic sizes are placed, and their views "
           "made, at the shape each backward runs at", "cpu",
           ("tests/test_borrow.py::"
            "test_a_dynamic_variant_computes_temporaries_in_the_arena_at_every_shape",)),
    Mutant("reinplace-kept-at-any-cost", "fxslots/in_arena.py",
           "    if displaced > freed:\n",
           "    if False:\n",
           "results over saved inputs are dropped where they keep more gradient bytes out of the "
           "arena than they take out of the pool", "cpu",
           ("tests/test_borrow.py::"
            "test_results_over_saved_inputs_are_dropped_where_they_cost_more_arena_than_they_save",)),
    Mutant("accumulate-key-holds-one-grad-address", "fxslots/runtime/cudagraphs/executor.py",
           "variant.grads_at() if grads and",
           "variant.grads_at()[:1] if grads and",
           "an accumulating backward's graph is keyed by every .grad address: the gradients the "
           "arena holds depend on the slot the step's first backward ran in", "cpu",
           ("tests/test_prepare.py::test_prepare_in_flight_sizes_each_slot_for_its_own_microbatch",)),
    Mutant("lent-arena-reused", RING,
           "free = [s for s in self.slots if not s.pending() and not s.lent_out()]\n"
           "        if not free:\n            # A",
           "free = [s for s in self.slots if not s.pending()]\n        if not free:\n            # A",
           "no forward writes an arena whose gradients someone still uses", "cpu",
           ("tests/test_overlay.py::"
            "test_gradients_kept_past_the_next_forward_move_the_arena_not_the_gradients",)),
    Mutant("backward-returns-slot-bytes", UNALIAS,
           "        if isinstance(o, fx.Node) and _views_any(o, slotted):",
           "        if False:",
           "a gradient the backward returns never views the slot (the next forward writes it)",
           "cpu", ("tests/test_runtime.py::test_a_gradient_that_is_a_saved_tensor_outlives_the_slot",)),
    Mutant("viewed-memory-not-kept", STATE,
           "    viewed.append((memory, alias_ref))\n",
           "",
           "memory a held gradient views (an arena, an output buffer) outlives its slot, its "
           "region and fxslots.reset()", "cpu",
           ("tests/test_overlay.py::test_gradients_held_across_reset_keep_their_values",)),
    Mutant("arena-grads-despite-retain-graph", DELIVERY,
           "and not slot.watched and not _torch.keep_graph())",
           "and not slot.watched)",
           "a backward that keeps its graph (retain_graph) leaves the saved bytes alone", "cpu",
           ("tests/test_overlay.py::test_retain_graph_keeps_the_saved_bytes_it_reads_again",)),
    Mutant("auto-ignores-reload-deadlines", OFFLOADING,
           "        if t > needed:\n",
           "        if False:\n",
           "offload='auto' takes a group only if its reload can end before the backward reads it",
           "cpu",
           ("tests/test_offload.py::"
            "test_reloads_fit_when_one_queue_ends_each_before_it_is_needed",)),
    Mutant("auto-not-bounded-to-its-shape", OFFLOADING,
           "            _torch.guard_at_most(ctx.shape_env, s, hint)\n",
           "            pass\n",
           "a dynamic graph auto offloads from runs shapes up to the one it was planned at",
           "cpu",
           ("tests/test_offload.py::"
            "test_auto_under_dynamic_shapes_compiles_again_for_a_larger_shape",)),
    Mutant("auto-guards-before-its-plan-is-accepted", BACKEND,
           "            offload, self.commit_offload = choose_offload(self.options.offload, saved, ctx)\n",
           "            offload, self.commit_offload = choose_offload(self.options.offload, saved, ctx)\n"
           "            self.commit_offload()\n",
           "auto's shape guards go in only with a plan that is used (a fallback stays unguarded)",
           "cpu", ("tests/test_offload.py::test_auto_guards_nothing_when_its_plan_falls_back",)),
    Mutant("auto-guards-a-declared-range", OFFLOADING,
           "    ranged = _torch.declares_ranges()\n",
           "    ranged = False\n",
           "auto adds no guard where the user declared a size range (it would fail the compile)",
           "cpu",
           ("tests/test_offload.py::test_auto_leaves_a_range_the_user_gave_unguarded",)),
    Mutant("prepare-recaptures-warn", REGION,
           "        if not state.preparing:\n            self._recaptures[key] += 1\n",
           "        if True:\n            self._recaptures[key] += 1\n",
           "recaptures inside fxslots.prepare do not count toward the moving-argument warning",
           "cpu",
           ("tests/test_prepare.py::"
            "test_prepares_own_grad_moves_do_not_count_toward_the_recapture_warning",)),
    Mutant("auto-offloads-groups-too-small", COSTS,
           "return nbytes >= self.copy_latency * self.link",
           "return True",
           "offload='auto' leaves groups too small to pay for a copy on the device", "cpu",
           ("tests/test_offload.py::test_auto_leaves_groups_too_small_to_pay_for_their_copy",)),
    Mutant("covered-join-before-its-wait", OFFLOAD,
           "key=lambda c: (plan.at[c], -c)",
           "key=lambda c: (plan.at[c], c)",
           "a forward wait that another joins comes after that wait (else its bytes are freed "
           "while copied)", "cpu",
           ("tests/test_offload.py::test_one_wait_joins_a_run_of_copies_and_comes_first",)),
    Mutant("join-waits-for-the-first-copy", OFFLOAD,
           "held, last = set(plan.held), {at: c for c, at in enumerate(plan.at)}",
           "held, last = set(plan.held), {at: c for c, at in reversed(list(enumerate(plan.at)))}",
           "the one wait of merged forward joins is the last copy's: an earlier one's does not "
           "join the copies after it", "cpu",
           ("tests/test_offload.py::test_one_wait_joins_a_run_of_copies_and_comes_first",)),
    Mutant("merged-joins-overfill-the-window", OFFLOAD,
           "            if ready and in_flight + nbytes > window:\n",
           "            if False:\n",
           "copies done and waiting for a merged join count in the window: a copy with no room "
           "beside them joins them first", "cpu",
           ("tests/test_offload.py::test_the_window_bounds_the_bytes_in_transfer",)),
    Mutant("covered-reload-before-its-wait", OFFLOAD,
           "for g in [last, *run[:-1]]:",
           "for g in [*run[:-1], last]:",
           "a reload another wait joins is handed to its readers after that wait", "cpu",
           ("tests/test_offload.py::test_one_wait_joins_a_run_of_copies_and_comes_first",)),
    Mutant("forward-joins-ignore-slack", OFFLOAD,
           "link = max(link, t) + caps.join_seconds(nbytes)",
           "link = max(link, t) + caps.transfer_seconds(nbytes)",
           "forward joins are planned join_slack times the copy's estimated time after it",
           "cpu", ("tests/test_offload.py::test_forward_joins_move_later_with_join_slack",)),
    Mutant("forward-ignores-offload-window", OFFLOAD,
           "while pending and in_flight + nbytes > window:",
           "while False:",
           "the forward joins the oldest copy before a new one takes the copies in flight past "
           "the offload window", "cpu",
           ("tests/test_offload.py::test_joins_wait_for_the_link_only_when_the_window_is_full",)),
    Mutant("reload-ignores-offload-window", OFFLOAD,
           "if not live or sum(b for _, b in live) + nbytes <= window:",
           "if True:",
           "a reload is issued only when the reloaded groups still read leave it room in the "
           "window", "cpu",
           ("tests/test_offload.py::test_reloads_wait_for_room_in_the_window",)),
    Mutant("uncaptured-backward-adds-in-groups", VARIANT,
           "((captured and self.accumulate.captured) or _ran(self.accumulate.kernel)",
           "(self.accumulate.captured or _ran(self.accumulate.kernel)",
           "an uncaptured accumulating backward adds at its end: one that raises part-way adds "
           "nothing", "cpu",
           ("tests/test_accumulate.py::"
            "test_an_uncaptured_backward_that_raises_part_way_adds_nothing",)),
    Mutant("captured-backward-adds-at-the-end", "fxslots/passes/accumulate.py",
           "groups = [(output, pairs)] if flush_bytes is None else _groups(graph, pairs, "
           "flush_bytes)",
           "groups = [(output, pairs)]",
           "a captured accumulating backward adds gradients in groups as it computes them "
           "(their memory serves the rest of the backward)", "cpu",
           ("tests/test_accumulate.py::"
            "test_a_captured_backward_adds_gradients_in_groups_as_it_computes_them",)),
    Mutant("warm-up-gradients-left-scattered", "fxslots/runtime/cudagraphs/executor.py",
           "warm_up(variant, key, gm, gargs, stale and variant.kept_grads(key))",
           "warm_up(variant, key, gm, gargs, False)",
           "the gradients a warm-up backward hands out (kept as .grad by an accumulating loop) "
           "are copies in one buffer, not scattered among its temporaries", "cpu",
           ("tests/test_accumulate.py::"
            "test_a_warm_up_backward_hands_out_its_gradients_in_one_buffer",)),
    Mutant("running-accumulator-not-verified", "fxslots/_torch/autograd.py",
           "if node is None or node.variable is not param:",
           "if node is None:",
           "an accumulator taken from the running backward node serves only the parameter it "
           "accumulates into (an id can outlive its tensor)", "cpu",
           ("tests/test_accumulate.py::"
            "test_the_running_nodes_accumulators_give_the_engines_verdict",)),
    Mutant("large-gradients-added-in-the-multi-tensor-add", "fxslots/passes/accumulate.py",
           "big = [one_each and value_bytes(g) >= ALONE_BYTES for _, g in group]",
           "big = [False for _, g in group]",
           "a captured backward adds each large gradient with an add_ of its own", "cpu",
           ("tests/test_accumulate.py::"
            "test_a_captured_backward_adds_large_gradients_one_by_one",)),
    Mutant("large-copies-in-the-multi-tensor-copy", "fxslots/_torch/__init__.py",
           "alone = {i for i, d in enumerate(dst) if d.nbytes >= FOREACH_MAX_BYTES}",
           "alone = set()",
           "a copy of FOREACH_MAX_BYTES or more is launched alone", "cpu",
           ("tests/test_runtime.py::"
            "test_foreach_copy_copies_large_tensors_alone_and_exactly",)),
    Mutant("slots-chosen-largest-first", "fxslots/runtime/alloc.py",
           "        return min(fits, key=lambda s: (s.nbytes + s.host_nbytes, s.index))",
           "        return max(free, key=lambda s: (s.nbytes, -s.index))",
           "a forward takes the smallest free slot that holds it (variants in flight together "
           "keep to slots of their own size)", "cpu",
           ("tests/test_runtime.py::test_each_variant_in_flight_keeps_to_a_slot_of_its_size",)),
    Mutant("host-arena-not-pinned", RING,
           'pin_memory=slot.device.type == "cuda")',
           "pin_memory=False)",
           "the host arena is pinned on CUDA (asynchronous, capturable copies)", "cuda",
           ("tests/test_cuda.py::test_offloaded_activations_match_eager_under_replay",)),
    Mutant("one-model-on-two-devices", RING,
           "            if (slot := self.slots[0]).device != device:",
           "            if False:",
           "one compiled model keeps its slots on one device", "cuda",
           ("tests/test_cuda_reliability.py::test_mixed_devices_one_model_moved_between_devices",)),
    Mutant("pool-handle-reused-after-death", POOL,
           "        if self.graphs == 0:\n            self.free()",
           "        if False:\n            self.free()",
           "a pool whose last graph died is never used again", "cuda",
           ("tests/test_cuda_reliability.py::test_capture_after_every_graph_of_the_pool_died",)),
    # (H200 run 15: dropping recover()'s first end_allocate_to_pool, or its set_stream,
    # survived: on torch 2.11 torch.cuda.graph's exit ends the pool routing and restores the
    # stream before it raises, so those calls are no-ops there, kept for versions that do not.)
    Mutant("failed-capture-not-recovered", POOL,
           "            recover(self.device, pool, stream, args)\n",
           "",
           "a failed capture leaves the streams and allocator as they were", "cuda",
           ("tests/test_cuda_reliability.py::"
            "test_failed_capture_leaves_everything_as_it_was_and_a_retry_succeeds",)),
    Mutant("failed-capture-leaves-rng-capturing", POOL,
           "        end_rng_capture(device, args)\n",
           "",
           "after a failed capture that retires the pool, random ops outside graphs still work "
           "(the RNG's capture flag is cleared)", "cuda",
           ("tests/test_cuda_reliability.py::"
            "test_failed_capture_leaves_everything_as_it_was_and_a_retry_succeeds",)),
    Mutant("offload-copy-blocking", STREAMS,
           "host.copy_(value, non_blocking=True)",
           "host.copy_(value)",
           "offload copies are asynchronous, so they can be captured", "cuda",
           ("tests/test_cuda.py::test_offloaded_activations_match_eager_under_replay",)),
    Mutant("offload-not-joined", STREAMS,
           "    if wait and event is not None:\n        torch.cuda.current_stream(value.device).wait_event",
           "    if False:\n        torch.cuda.current_stream(value.device).wait_event",
           "the compute stream joins a d2h copy before the device bytes are reused", "cuda",
           ("tests/test_cuda.py::test_offload_stays_ordered_with_a_slow_side_stream",)),
    Mutant("reload-not-joined", STREAMS,
           "    if wait and handle.event is not None:\n",
           "    if False:\n",
           "the compute stream joins a reload before the backward reads it", "cuda",
           ("tests/test_cuda.py::test_offload_stays_ordered_with_a_slow_side_stream",)),
    Mutant("norms-saved-and-copied", POLICIES,
           "            and not _torch.has_device_kernel(out, first.device.type))",
           "            and False)",
           "a layer or group norm no kernel writes into given memory is recomputed in backward "
           "instead of copied into the slot", "cpu",
           ("tests/test_numerics.py::test_norms_are_recomputed_in_backward_instead_of_copied",)),
    Mutant("host-scalar-saved", BACKEND,
           "lambda n: is_host_scalar(n) or policy(n),",
           "lambda n: policy(n),",
           "a 0-d CPU tensor computed from the shapes is recomputed, never saved (a host tensor "
           "among a GPU graph's saved tensors sends it back to running without slots)", "cpu",
           ("tests/test_numerics.py::test_a_float_of_the_shapes_is_recomputed_not_saved",)),
    Mutant("multi-output-host-scalar-recomputed", "fxslots/policies.py",
           'return all(not isinstance(v := a.meta.get("val"), (tuple, list)) and (',
           'return all((v := a.meta.get("val")) is v and (',
           "a 0-dim host output of an op with several (cross-entropy's total weight) is no host "
           "scalar to recompute (min-cut cannot recompute the op: the graph fell back)", "cpu",
           ("tests/test_fallback.py::"
            "test_a_checkpointed_llama_with_its_loss_in_the_graph_compiles_with_slots[aten]",)),
    Mutant("generators-not-registered", POOL,
           "        register_generators(graph, args, self.device)\n",
           "",
           "the generators a checkpointed random op's graphs take are registered with each "
           "capture (a replay draws new numbers, a recompute its forward's)", "cuda",
           ("tests/test_cuda_checkpointed_rng.py::"
            "test_checkpointed_dropout_is_captured_and_recomputes_its_forwards_mask",)),
    # The registration that does the work: after a capture that failed in capture_end, the pool
    # probe always failed on torch 2.11 (the pinned host allocator still records into the pool;
    # run 62b), so recovery ends the generators' capture in end_rng_capture's probe.
    Mutant("recovery-leaves-generators-capturing", POOL,
           "        register_generators(probe, args, device)\n"
           "        with torch.cuda.device(device), torch.cuda.graph(probe):",
           "        with torch.cuda.device(device), torch.cuda.graph(probe):",
           "a failed capture's recovery takes the generators it registered out of capture mode "
           "(torch before 2.14)", "cuda",
           ("tests/test_cuda_checkpointed_rng.py::"
            "test_a_failed_capture_takes_the_checkpoint_generators_out_of_capture_mode",
            "tests/test_cuda_checkpointed_rng.py::"
            "test_recovery_ends_the_capture_of_a_generator_that_drew_in_the_failed_capture")),
    Mutant("inference-inputs-not-staged", INFERENCE,
           "        copy_staged(cap.stage, args)\n",
           "",
           "an inference graph's replay reads its inputs where the capture staged them: each "
           "call copies them there first", "cpu",
           ("tests/test_inference_graphs.py::test_captured_inference_graphs_match_aot_eager",)),
    Mutant("inference-outputs-left-in-the-pool", INFERENCE,
           "        return cap.results((None, None), self.device)",
           "        return [o.value for o in cap.outs]",
           "an inference graph's outputs are copied out of the pool (the next replay writes "
           "those bytes)", "cpu",
           ("tests/test_inference_graphs.py::test_captured_inference_graphs_match_aot_eager",)),
    Mutant("inference-mutation-not-written-back", INFERENCE,
           "        write_back(args, cap.writeback)\n",
           "",
           "an inference graph's in-place update of an input reaches the caller's tensor, not "
           "just the staged copy", "cpu",
           ("tests/test_inference_graphs.py::test_captured_inference_graphs_match_aot_eager",)),
    Mutant("inference-replays-over-a-moved-parameter", INFERENCE,
           "if cap is not None and cap.moved(args) is None:",
           "if cap is not None:",
           "an inference graph captured over a parameter's old address is captured again "
           "where it moved", "cpu",
           ("tests/test_inference_graphs.py::test_a_moved_parameter_is_captured_again",)),
    Mutant("expanded-input-staged-whole", STAGING,
           "        if 0 in dst.stride():",
           "        if False:",
           "an expanded (stride-0) staged input is copied one slice (copy_ refuses to write "
           "overlapping memory)", "cpu",
           ("tests/test_graph_executor_cpu.py::test_an_expanded_input_is_staged_one_slice",)),
    Mutant("data-dependent-graph-break-reported-as-fallback", "fxslots/_torch/compiling.py",
           "return isinstance(e, (torch._dynamo.exc.TorchDynamoException, *breaks))",
           "return isinstance(e, torch._dynamo.exc.TorchDynamoException)",
           "an exception Dynamo turns into a graph break passes through untouched (no fallback "
           "warning, no strict error)", "cpu",
           ("tests/test_fallback.py::test_a_data_dependent_op_is_dynamos_graph_break_not_a_"
            "fallback",)),
    Mutant("masked-fill-without-its-clone", "fxslots/passes/expand.py",
           "        copied = graph.call_function(aten.copy_.default, (outs[0], node.args[0]))",
           "        copied = outs[0]",
           "masked_fill written into the slot copies its input there before filling", "cpu",
           ("tests/test_routes.py::test_expansions_are_bitwise_the_op_and_write_into_the_slot",)),
    Mutant("pad-copied-into-the-corner", "fxslots/passes/expand.py",
           "(inner, ndim - 1 - j, left, -right if right else None))",
           "(inner, ndim - 1 - j, 0, -(left + right) if left + right else None))",
           "constant_pad_nd copies its input into the slot narrowed by both pads of each "
           "dimension", "cpu",
           ("tests/test_routes.py::test_expansions_are_bitwise_the_op_and_write_into_the_slot",)),
    Mutant("composite-out-forms-counted-copy-free", "fxslots/routes.py",
           "    if not _torch.has_device_kernel(qualname, device_type) and qualname not in FILLS:",
           "    if not _torch.has_device_kernel(qualname, device_type) and False:",
           "only out= forms that write out= themselves count as copy-free (a generated composite "
           "runs the op, then copies)", "cpu",
           ("tests/test_routes.py::test_routes_that_would_be_a_hidden_copy_are_refused_with_a_"
            "remedy",)),
    Mutant("checked-buffer-moved-unnoticed", "fxslots/_torch/autograd.py",
           "r() is g and g.data_ptr() == ptr for r, g, ptr in",
           "r() is g for r, g, ptr in",
           "a .grad that moved under the same tensor (.data =) has its layout read again", "cpu",
           ("tests/test_accumulate.py::test_checked_buffers_are_read_again_once_replaced_or_"
            "moved",)),
    Mutant("replaced-buffer-not-checked", "fxslots/_torch/autograd.py",
           "    if checked is None or not checked.holds(grads):",
           "    if checked is None:",
           "a .grad the last check did not see has its layout read", "cpu",
           ("tests/test_accumulate.py::test_checked_buffers_are_read_again_once_replaced_or_"
            "moved",)),
    Mutant("backward-passes-wait-for-the-backward", "fxslots/backward.py",
           "    if signature(bw.graph) == prepared.source:",
           "    if False:",
           "the backward's passes run while the forward compiles (where a failure falls back), "
           "and the backward compile takes their result", "cpu",
           ("tests/test_fallback.py::test_the_backward_compiled_is_the_one_rewritten_while_the_"
            "forward_compiled",)),
    Mutant("backward-rewritten-from-another-graph", "fxslots/backward.py",
           "    if signature(bw.graph) == prepared.source:",
           "    if True:",
           "a backward unlike the one its passes ran on ahead is rewritten again, never "
           "replaced by that stale rewrite", "cpu",
           ("tests/test_fallback.py::test_a_backward_unlike_the_partitioners_is_rewritten_"
            "again_with_a_warning",)),
    Mutant("warm-up-gradients-copied-after", "fxslots/runtime/cudagraphs/delivery.py",
           "    views = fresh_views(d.nbytes, d.runs, variant.device)",
           "    views = None",
           "where that peaks lower, the warm-up backward computes the gradients autograd may "
           "keep into their one buffer (copied there after, each is held twice at its end)",
           "cpu",
           ("tests/test_accumulate.py::test_the_warm_up_backward_computes_its_gradients_into_"
            "their_buffer",)),
    Mutant("warm-up-buffer-left-out-of-its-peak", "fxslots/overlay.py",
           "    delivering = max(buffer + twin[0], buffer + twin[1] + undelivered)",
           "    delivering = max(twin[0], buffer + twin[1] + undelivered)",
           "a warm-up delivers its gradients into their buffer only where that peaks lower: the "
           "buffer is held through the whole backward", "cpu",
           ("tests/test_accumulate.py::test_the_warm_up_delivers_only_where_that_peaks_lower",
            "tests/test_accumulate.py::test_a_backward_that_peaks_before_its_gradients_copies_"
            "them_after")),
    Mutant("peak-estimate-keeps-copied-sources", "fxslots/passes/lifetimes.py",
           "or _aliases(user, arg)",
           "or True",
           "lifetimes follow aliases by schema: the source of a copy_ into a buffer is freed "
           "after it, not kept to the end with the buffer (the warm-up's peak estimate)", "cpu",
           ("tests/test_accumulate.py::test_allocated_peak_counts_what_a_run_holds_at_once",)),
    Mutant("tangents-into-a-held-buffer", BANKS,
           "    buffer = banks.unheld()\n",
           "    buffer = banks.banks[0]\n",
           "a backward stages its tangents in an output buffer of its slot only where the caller "
           "holds nothing handed out of it", "cpu",
           ("tests/test_deliver_forward.py::"
            "test_a_backward_after_a_held_output_stays_in_the_staging_buffer",
            "tests/test_output_buffers_fuzz.py")),
    Mutant("staged-tangent-handed-out-in-place", EXECUTOR,
           "        staging = set(arenas) | {t.data_ptr() for t in self._staged_in(key)}",
           "        staging = set(arenas)",
           "a captured backward's gradient that is its tangent as staged is copied out, never "
           "handed out in memory the next backward stages into", "cpu",
           ("tests/test_deliver_forward.py::"
            "test_tangents_are_staged_in_the_output_buffer_the_caller_let_go",)),
    Mutant("uncaptured-backward-hands-out-its-tangent", EXECUTOR,
           "        return own_user_outputs(out, len(out), self._staged_in(key))",
           "        return out",
           "a backward run uncaptured (its warm-up) copies out a gradient that is its tangent "
           "as staged", "cpu",
           ("tests/test_deliver_forward.py::"
            "test_tangents_are_staged_in_the_output_buffer_the_caller_let_go",)),
    Mutant("fused-product-the-wrong-way-round", "fxslots/passes/accumulate.py",
           "        if flipped:  # b = (a @ m)^T = m^T @ a^T",
           "        if False:  # b = (a @ m)^T = m^T @ a^T",
           "a gradient that is a transposed product is added by the product of the transposed "
           "operands, swapped", "cpu",
           ("tests/test_accumulate.py::"
            "test_a_fused_product_adds_its_transpose_the_right_way_round",)),
    Mutant("fused-product-overwrites-the-grad", "fxslots/passes/accumulate.py",
           "            add = graph.call_function(aten.addmm_.default, (b, a, m))",
           "            add = graph.call_function(aten.mm.out, (a, m), {\"out\": b})",
           "a fused product adds into .grad (beta=1), never overwrites it", "cpu",
           ("tests/test_accumulate.py::"
            "test_fused_accumulation_adds_each_weight_gradient_in_its_product",)),
    Mutant("retired-buffer-settles-the-allocator", "fxslots/runtime/cudagraphs/staging.py",
           "        self.ensure(nbytes, device, settle=not retired)",
           "        self.ensure(nbytes, device, settle=True)",
           "a buffer replaced because the caller holds the last one is allocated without "
           "emptying the allocator's cache (a device sync each step)", "cpu",
           ("tests/test_deliver.py::"
            "test_a_buffer_replaced_every_step_never_settles_the_allocator",)),
    Mutant("lasting-buffer-in-a-cached-segment", "fxslots/runtime/alloc.py",
           "        torch.cuda.empty_cache()\n",
           "        pass\n",
           "a buffer that lives as long as its region never takes part of a cached free "
           "segment (which it would keep reserved)", "cuda",
           ("tests/test_cuda.py::test_a_lasting_buffer_never_keeps_a_free_segment_reserved",)),
    Mutant("prepare-holds-its-outputs", "fxslots/prepare.py",
           "    del outs\n",
           "    pass\n",
           "prepare lets each output go before the backwards, as a loop that turns it into its "
           "loss does, and captures the graphs that loop replays (tangents in the output buffer)",
           "cpu", ("tests/test_deliver_forward.py::"
                   "test_prepare_captures_the_graphs_of_a_loop_that_lets_its_outputs_go",)),
    Mutant("uncaptured-backward-stages-its-tangents", "fxslots/runtime/cudagraphs/executor.py",
           "        if self.capturing:\n            gargs, tangents_in = self.tangents.stage(",
           "        if True:\n            gargs, tangents_in = self.tangents.stage(",
           "a backward that is never captured leaves its tangents where they are: no output or "
           "staging buffer only to hold them", "cpu",
           ("tests/test_deliver_forward.py::"
            "test_a_backward_that_cannot_be_captured_stages_no_tangents",)),
    Mutant("stale-graphs-dropped-in-one-executor", "fxslots/runtime/cudagraphs/executor.py",
           "        target = self.deliveries.target(variant, slot, outputs, self._drop_everywhere)",
           "        target = self.deliveries.target(variant, slot, outputs, self._drop)",
           "a moved output buffer's graphs are dropped in every executor (every shape that "
           "wrote it), not only the one that moved it", "cpu",
           ("tests/test_deliver_forward.py::"
            "test_a_moved_buffer_leaves_no_stale_graph_in_any_shape",)),
    Mutant("slot-saved-tensors-marked-dynamic", "fxslots/_torch/compiling.py",
           "        marks.pop(i, None)\n",
           "        pass\n",
           "saved tensors in the slot reach the backward without AOTAutograd's per-call dynamic "
           "marks (an attribute per tensor, meaningless on the arena token)", "cpu",
           ("tests/test_graph_executor_cpu.py::"
            "test_saved_tensors_in_the_slot_carry_no_dynamic_marks",)),
    Mutant("grouped-runs-in-the-given-order", "fxslots/runtime/layout.py",
           "    return [indices[k] for k in order], view_runs([geometry[k] for k in order])",
           "    return list(indices), view_runs([geometry[k] for k in order])",
           "outputs handed out after a replay as views grouped by geometry go each to its own "
           "index", "cpu",
           ("tests/test_runtime.py::"
            "test_grouped_runs_make_few_views_and_keep_each_index_its_own",
            "tests/test_deliver.py")),
    Mutant("saved-inputs-lose-dynamic-marks", "fxslots/passes/rewrite.py",
           "    return [t for t in saved.tensors if plan.placement(t.group).write is not Write.NONE]",
           "    return list(saved.tensors)",
           "only saved tensors in the slot lose AOTAutograd's dynamic marks: the caller's own "
           "tensors, saved as they are (graphs off), keep theirs", "cpu",
           ("tests/test_graph_executor_cpu.py::"
            "test_without_graphs_a_saved_input_keeps_its_dynamic_mark",)),
    Mutant("expanded-output-copied-in-its-strides", "fxslots/_torch/__init__.py",
           "    return torch._debug_has_internal_overlap(t) != 0",
           "    return False",
           "an output whose elements share memory (expanded) is copied out of the pool into dense "
           "memory: a copy cannot write an overlapping destination", "cpu",
           ("tests/test_graph_executor_cpu.py::test_an_expanded_output_is_copied_out_dense",)),
    Mutant("collapsed-backward-not-expanded", "fxslots/runtime/collapse.py",
           "        if len(args) == self.short:\n            return [args[i] for i in self.expand]",
           "        if False:\n            return [args[i] for i in self.expand]",
           "a backward whose forward handed over one token per arena gets the token back at "
           "every saved place", "cpu",
           ("tests/test_graph_executor_cpu.py::"
            "test_replayed_forwards_hand_aotautograd_one_saved_tensor_per_arena",)),
    Mutant("collapse-across-reordered-saved-tensors", "fxslots/runtime/collapse.py",
           "    if [b for _, b in pairs] != sorted(b for _, b in pairs):",
           "    if False:",
           "saved tensors are left out of a call only where forward outputs and backward "
           "arguments list them in one order (else the others would shift)", "cpu",
           ("tests/test_runtime.py::"
            "test_collapse_leaves_out_all_but_one_saved_tensor_per_arena",)),
    Mutant("effect-token-taken-for-a-parameter", "fxslots/policies.py",
           "            and x.numel() > 0)",
           "            or x.numel() > 0)",
           "the side-effect token of an effectful op (a size-0 static input, None at run time) "
           "anchors no region and takes no .grad", "cpu",
           ("tests/test_backend.py::test_a_graph_with_an_effectful_op_trains_like_aot_eager",)),
    Mutant("attention-takes-dropout", "fxslots/attention.py",
           '    if given.get("dropout_p", 0.0) != 0.0:',
           '    if given.get("dropout_p", 0.0) == -1.0:',
           "fxslots' attention kernel never takes an attention that drops out (its mask comes "
           "from PyTorch's generator, inside PyTorch's kernel)", "cpu",
           ("tests/test_attention.py::"
            "test_efficient_attention_routes_through_fxslots_kernel_only_where_it_computes_the_op",)),
    Mutant("attention-takes-grouped-heads", "fxslots/attention.py",
           "            and _same(q.shape[1], k.shape[1], v.shape[1]) and _same(q.shape[3], k.shape[3])):",
           "            and _same(q.shape[3], k.shape[3])):",
           "fxslots' attention kernel takes only query, key and value of one head count", "cpu",
           ("tests/test_attention.py::"
            "test_efficient_attention_routes_through_fxslots_kernel_only_where_it_computes_the_op",)),
    Mutant("attention-route-ignores-cost", "fxslots/attention.py",
           "    if flops > bounds[q.dtype]:",
           "    if flops > math.inf:",
           "an attention larger than MAX_FLOPS keeps PyTorch's kernel and one copy (faster there)",
           "cpu", ("tests/test_attention.py::"
                   "test_efficient_attention_is_copied_where_pytorch_kernel_and_a_copy_are_faster",)),
    Mutant("out-arguments-by-position", "fxslots/routes.py",
           "    return [sets.index(a) if a in sets else i for i, a in enumerate(outs)]",
           "    return list(range(len(outs)))",
           "an out= argument fills the return that is it (cuDNN attention's seeds are returns 6 "
           "and 7, past its sequence lengths), not the return at its own position", "cpu",
           ("tests/test_attention.py::"
            "test_the_cudnn_variant_returns_its_outputs_where_the_op_returns_them",)),
    Mutant("several-outputs-left-to-inductor", "fxslots/passes/lower.py",
           "        if _writes_several(node):",
           "        if False:",
           "under kernels=\"inductor\" an op writing several slots (fxslots' attention) is one "
           "fxslots::<op>_into call that returns nothing, its values read where it wrote them",
           "cpu", ("tests/test_inductor_several_outputs.py::"
                   "test_an_op_writing_several_slots_is_one_call_inductor_compiles_and_the_audit_"
                   "reads",)),
    Mutant("own-attention-kernel-under-inductor", "fxslots/passes/collect.py",
           "                and not all(expr(d).is_number for d in g.root.shape)}",
           "                and False}",
           "under kernels=\"inductor\" attention of symbolic size keeps PyTorch's kernel and its "
           "copy (an output no slot holds would be resized unseen by Inductor)", "cpu",
           ("tests/test_attention.py::"
            "test_under_inductor_attention_of_symbolic_size_keeps_pytorch_kernel_and_its_copy",)),
    Mutant("attention-call-excluded-by-output", "fxslots/passes/collect.py",
           "    return g.root.producer or g.root.name",
           "    return g.root.name",
           "under kernels=\"inductor\" every output of an attention call of symbolic size keeps "
           "PyTorch's kernel, its static seed too (H200 run 40a)", "cpu",
           ("tests/test_attention.py::"
            "test_under_inductor_attention_of_symbolic_size_keeps_pytorch_kernel_and_its_copy",)),
    Mutant("collect-not-told-the-kernels", "fxslots/backend.py",
           "                        static, self.options.kernels, summary=lambda s: (",
           "                        static, summary=lambda s: (",
           "the compile tells collect_saved which kernels run (under Inductor fxslots' attention "
           "ops of symbolic size are not taken)", "cpu",
           ("tests/test_attention.py::test_the_backend_tells_collect_which_kernels_run",)),
    Mutant("own-attention-kernel-on-rocm", "fxslots/attention.py",
           "    if torch.version.hip is not None:",
           "    if False:",
           "on ROCm attention keeps PyTorch's kernel (its logsumexp layout is not the one "
           "fxslots' kernel writes)", "cpu",
           ("tests/test_attention.py::test_attention_on_rocm_keeps_pytorch_kernel",)),
    Mutant("fused-under-inductor-silent", "fxslots/grads.py",
           "        if options.grad_accumulation == \"fused\":",
           "        if False:",
           "grad_accumulation=\"fused\" under kernels=\"inductor\" says it adds as \"graph\" "
           "does", "cpu",
           ("tests/test_accumulate.py::"
            "test_fused_accumulation_under_inductor_says_it_adds_as_graph",)),
    Mutant("accumulating-backward-compiled-up-front", "fxslots/grads.py",
           "                                    lazily=True)",
           "                                    lazily=False)",
           "under kernels=\"inductor\" the accumulating backward is compiled at its first call, "
           "not for loops that never keep .grad", "cpu",
           ("tests/test_accumulate.py::test_inductor_compiles_a_backward_at_its_first_call",)),
    Mutant("plain-backward-compiled-up-front", "fxslots/backend.py",
           "                                     else \"a graph without slots\"), lazily=True,",
           "                                     else \"a graph without slots\"), lazily=False,",
           "under kernels=\"inductor\" the plain backward is compiled at its first call (a loop "
           "whose backwards deliver never runs it)", "cpu",
           ("tests/test_accumulate.py::"
            "test_a_backward_inductor_cannot_compile_at_its_first_call_runs_its_aten_graph",)),
    Mutant("lazy-backward-without-fallback", "fxslots/kernels.py",
           "            self.run, self.compiled = made or self._fallback, made is not None",
           "            self.run, self.compiled = made, made is not None",
           "a backward Inductor cannot compile at its first call runs its ATen graph", "cpu",
           ("tests/test_accumulate.py::"
            "test_a_backward_inductor_cannot_compile_at_its_first_call_runs_its_aten_graph",)),
    Mutant("warm-count-before-lazy-compile", "fxslots/runtime/cudagraphs/executor.py",
           "            self.warm[warm] = state.counters[\"inductor_compiles\"]",
           "            self.warm[warm] = compiles",
           "a backward Inductor compiles in its warm-up is captured at its next run, not warmed "
           "up again", "cpu",
           ("tests/test_accumulate.py::"
            "test_a_backward_compiled_in_its_warm_up_is_captured_next",)),
    Mutant("inductor-warm-up-compacts-delivered-grads", "fxslots/runtime/cudagraphs/delivery.py",
           "        kept = tuple(i for i in kept if i not in d.outputs)",
           "        kept = kept",
           "Inductor's delivering warm-up leaves the gradients it delivered in the output buffer "
           "(not copied into a second one)", "cpu",
           ("tests/test_deliver.py::"
            "test_inductor_warm_up_leaves_delivered_gradients_in_the_buffer",)),
    Mutant("lazy-compile-at-symbolic-shape", "fxslots/kernels.py",
           "    return any(isinstance(d, torch.SymInt) for x in example_inputs",
           "    return False and any(isinstance(d, torch.SymInt) for x in example_inputs",
           "a backward of symbolic shape is compiled while Dynamo compiles the frame (Inductor's "
           "guards on it are dropped after)", "cpu",
           ("tests/test_accumulate.py::test_a_backward_of_symbolic_shape_is_compiled_up_front",)),
    Mutant("lazy-fallback-not-a-graph", "fxslots/runtime/variant.py",
           "    return getattr(kernel, \"run\", None) or kernel",
           "    return kernel",
           "a backward that fell back to its ATen graph at its first call runs as that graph "
           "(the executor names its nodes)", "cpu",
           ("tests/test_accumulate.py::"
            "test_a_backward_inductor_cannot_compile_at_its_first_call_runs_its_aten_graph",)),
    Mutant("cudnn-attention-route-ignores-cost", "fxslots/attention.py",
           "MAX_FLOPS_CUDNN = {torch.float16: 16e6, torch.bfloat16: 16e6}",
           "MAX_FLOPS_CUDNN = {torch.float16: 16e12, torch.bfloat16: 16e12}",
           "cuDNN's attention keeps its kernel and one copy above MAX_FLOPS_CUDNN (3-4x faster "
           "there)", "cpu",
           ("tests/test_attention.py::"
            "test_cudnn_attention_routes_through_fxslots_kernel_in_half_types_while_small",)),
    Mutant("aten-several-outputs-lowered", "fxslots/passes/lower.py",
           "    if not isinstance(node.target, _torch.OpOverload) or node.target.namespace != \"fxslots\":",
           "    if not isinstance(node.target, _torch.OpOverload):",
           "ATen's ops writing several slots reach Inductor as they are (as one fxslots call it "
           "could not see the output sort resizes: Mixtral's gradients were wrong)", "cpu",
           ("tests/test_zoo.py::test_mixtral_with_inductor_kernels_writes_its_grouped_matmul_in_place",)),
    Mutant("scratch-read-after-resize", "fxslots/passes/lower.py",
           "    if (item.users and _slot_view(written) is None",
           "    if (False and _slot_view(written) is None",
           "an output read from scratch the op resizes is not lowered (Inductor would read it at "
           "the size it saw)", "cpu",
           ("tests/test_inductor_several_outputs.py::"
            "test_an_output_read_from_scratch_the_op_resizes_is_not_lowered",)),
    Mutant("returned-size-not-from-its-input", "fxslots/passes/lower.py",
           "            if expr(size) == want:",
           "            if expr(size) != want:",
           "a size an op writing several slots returns (cuDNN attention's sequence lengths) is "
           "read from the input that has it", "cpu",
           ("tests/test_inductor_several_outputs.py::"
            "test_a_size_the_op_returns_is_read_from_the_input_that_has_it",)),
    Mutant("attention-kernel-retried-after-failing", "fxslots/attention.py",
           "    if not _failed:",
           "    if True:",
           "once fxslots' attention kernel could not run, attention runs PyTorch's kernel and a "
           "copy without trying (and warning) again", "cpu",
           ("tests/test_attention.py::"
            "test_where_the_kernel_cannot_run_attention_runs_pytorch_kernel_and_a_copy",)),
    Mutant("attention-sizes-hashed", "fxslots/attention.py",
           "    if not (_same(q.shape[0], k.shape[0], v.shape[0]) and _same(k.shape[2], v.shape[2])",
           "    if not (len({q.shape[0], k.shape[0], v.shape[0]}) == 1 and _same(k.shape[2], "
           "v.shape[2])",
           "the attention route compares symbolic sizes without hashing them (SymInt refuses: "
           "every dynamic graph with attention fell back to no slots) or guarding on them", "cpu",
           ("tests/test_attention.py::"
            "test_attention_with_symbolic_sizes_routes_without_hashing_or_guarding",)),
    Mutant("seed-copied-without-dropout", "fxslots/passes/rewrite.py",
           "        if unread_seed(src):",
           "        if False:",
           "SDPA's dropout seed and offset are zeroed in their slot without dropout, not copied "
           "(PyTorch's efficient kernel hands them out on the host: Inductor's copy kernel could "
           "not launch)", "cpu",
           ("tests/test_attention.py::"
            "test_a_dropout_seed_without_dropout_is_zeroed_in_its_slot_not_copied",)),
    Mutant("seed-zeroed-by-zero_", "fxslots/passes/rewrite.py",
           "            copy = graph.call_function(aten.fill_.Scalar, (d, 0))",
           "            copy = graph.call_function(aten.zero_.default, (d,))",
           "the seed's zeros are written by an op Inductor lowers (zero_ made it refuse the whole "
           "forward)", "cpu",
           ("tests/test_attention.py::test_a_zeroed_seed_compiles_under_inductor",)),
    Mutant("host-seed-slotted", "fxslots/passes/collect.py",
           "            why = host_read_seed(node) or lazy_bit(node, _tensor_val(node))",
           "            why = lazy_bit(node, _tensor_val(node))",
           "efficient attention with dropout runs without slots: its backward reads the seed on "
           "the host outside a CUDA graph and from the device inside one", "cpu",
           ("tests/test_attention.py::test_efficient_attention_with_dropout_runs_without_slots",)),
    Mutant("grads-watched-without-overlay", "fxslots/runtime/variant.py",
           "            if self.deliver is not None and self.deliver.overlay is not None:",
           "            if self.deliver is not None:",
           "only a backward that can put gradients in its arena keys its accumulating twin by "
           "where .grad is (with gradients kept out of it, prepare(in_flight=True) left three "
           "to training)",
           "cpu", ("tests/test_prepare.py::"
                   "test_prepare_in_flight_sizes_each_slot_for_its_own_microbatch[buffer]",)),
    Mutant("prepare-holds-each-group-once", "fxslots/prepare.py",
           "            for first in (0, 0) if len(group) == 1 else range(len(group)):",
           "            for first in (0,) if len(group) == 1 else range(len(group)):",
           "prepare(hold_outputs=True) runs each shape twice in a row, holding the first run's "
           "outputs: its forward into both output buffers, its tangents in both", "cpu",
           ("tests/test_deliver_forward.py::"
            "test_prepare_hold_outputs_captures_both_buffers_of_every_shape",)),
    Mutant("held-output-tangents-in-the-staging-buffer", BANKS,
           "variant.region.ring.options.slots > 1",
           "variant.region.ring.options.slots > 0",
           "a backward whose output the caller holds stages its tangents in the slot's other "
           "output buffer (one slot): no staging buffer beside the two", "cpu",
           ("tests/test_deliver_forward.py::"
            "test_a_loop_that_holds_its_output_stages_tangents_in_the_other_buffer",)),
    Mutant("prepare-holds-two-outputs-through-a-backward", "fxslots/prepare.py",
           "        held[:] = [o for out in outs for o in out]",
           "        held.extend(o for out in outs for o in out)",
           "prepare(hold_outputs=True) lets the last outputs go after the next forwards, as "
           "rebinding ``out`` does, and captures the graphs that loop replays", "cpu",
           ("tests/test_deliver_forward.py::"
            "test_a_loop_that_holds_its_output_stages_tangents_in_the_other_buffer",)),
    Mutant("fence-lowered-as-a-call", "fxslots/_torch/inductor.py",
           "            V.graph.mark_buffer_mutated(t.get_name())  # realizes its pending readers",
           "            pass",
           "Inductor computes a value still pending on a fenced saved tensor before the fence "
           "(lowered as a plain call, it computed it after, over the gradient)", "cpu",
           ("tests/test_fence.py::"
            "test_inductor_reads_a_saved_tensor_before_a_fenced_gradient_takes_its_bytes",)),
    Mutant("gradients-written-unfenced", "fxslots/passes/fence.py",
           "        if dead:",
           "        if False:",
           "under Inductor a gradient written over saved bytes is fenced after their last reads",
           "cpu", ("tests/test_fence.py::"
                   "test_inductor_reads_a_saved_tensor_before_a_fenced_gradient_takes_its_bytes",)),
    Mutant("fences-not-chained", "fxslots/passes/fence.py",
           "        chain = new[-1] if new else chain",
           "        chain = None",
           "each fence declares one tensor an earlier fence did, so that it comes after it",
           "cpu", ("tests/test_fence.py::"
                   "test_a_fence_declares_the_groups_dead_before_its_write_and_chains_to_the_last",)),
    Mutant("misaligned-group-fenced", "fxslots/in_arena.py",
           "p.storage_start % 16 == 0}",
           "p.storage_start % 1 == 0}",
           "a group whose tensors Inductor may realign (and copy back over a gradient) never "
           "lends bytes under Inductor", "cpu",
           ("tests/test_fence.py::"
            "test_only_groups_whose_tensors_keep_their_alignment_may_be_fenced",)),
    Mutant("fences-planned-before-inductor-rewrites", "fxslots/_torch/inductor.py",
           "        patch[\"post_grad_custom_post_pass\"] = _after(",
           "        patch[\"post_grad_custom_pre_pass\"] = _after(",
           "gradient writes are fenced on the graph Inductor lowers, after its rewrites (its mm "
           "+ add fusion moved a read of a saved activation past a gradient over its bytes)",
           "cpu", ("tests/test_fence.py::"
                   "test_inductor_gradients_in_the_arena_bitwise_torch_compile[gpt]",)),
    Mutant("copy-fenced-at-the-copy", "fxslots/passes/fence.py",
           "    src = node.args[1] if node.target is _COPY else node",
           "    src = node",
           "a copied gradient is fenced at its value's producer, so that Inductor still stores "
           "it from the kernel that computes it (no buffer of its own, no copy kernel)", "cpu",
           ("tests/test_fence.py::"
            "test_a_gradient_whose_kernel_reads_a_saved_tensor_never_takes_its_bytes",)),
    Mutant("reads-fused-into-a-gradient-kept-at-their-nodes", "fxslots/in_arena.py",
           "        reads = fused_reads(graph, reads, writes)",
           "        reads = tuple(reads)",
           "a saved tensor read inside the kernel that computes a gradient is read at that "
           "gradient's write: the plan gives it none of its bytes and no fence splits the "
           "kernel", "cpu",
           ("tests/test_fence.py::"
            "test_a_gradient_whose_kernel_reads_a_saved_tensor_never_takes_its_bytes",)),
    Mutant("shared-values-always-inline", "fxslots/passes/fence.py",
           "(len(n.users) <= 1 or len(reads[n]) <= limit)",
           "True",
           "a value with several users that reads many stored values is stored once, not "
           "counted as computed inline (an embedding's scatter would reach back through "
           "every layer)", "cpu",
           ("tests/test_fence.py::"
            "test_reads_inductor_fuses_into_a_gradients_kernel_move_to_its_write",)),
    Mutant("scatter-result-written-by-the-scatter", "fxslots/passes/fence.py",
           "and src.target not in _SCATTERS)",
           ")",
           "a copied scatter result is written at its copy, not at the scatter (which stores "
           "it in a buffer of its own)", "cpu",
           ("tests/test_fence.py::test_a_copied_gradient_is_written_where_its_value_is_computed",)),
    Mutant("small-generated-gradients-fenced", "fxslots/in_arena.py",
           "        writes = unfenced_small(graph, writes, self.nbytes, MIN_BYTES)",
           "        writes = unfenced_small(graph, writes, self.nbytes, 0)",
           "a gradient under 1 MiB that a kernel Inductor generates writes takes only bytes no "
           "node reads and is not fenced (fenced, GPT's LayerNorm bias split its kernel)", "cpu",
           ("tests/test_fence.py::test_fences_cost_no_kernel",)),
    Mutant("scatter-into-an-unzeroed-buffer", "fxslots/passes/deliver.py",
           "put = call(aten.index_put_.default, call(aten.fill_.Scalar, buf, 0),",
           "put = call(aten.index_put_.default, buf,",
           "an embedding's gradient scattered into its buffer zeroes the buffer first", "cpu",
           ("tests/test_deliver.py::"
            "test_inductor_form_scatters_an_embedding_gradient_into_its_buffer",
            "tests/test_fence.py::"
            "test_fenced_llama_gradients_are_torch_compiles")),
    Mutant("scatter-unmasked", "fxslots/passes/deliver.py",
           "            values = call(aten.where.self, mask, values, zero)",
           "            pass",
           "the masked form's values are zeroed where masked off (a padding index's row keeps a "
           "zero gradient)", "cpu",
           ("tests/test_deliver.py::"
            "test_inductor_form_scatters_an_embedding_gradient_into_its_buffer",)),
    Mutant("scatter-reads-counted-at-the-fill", "fxslots/passes/fence.py",
           "    out = [first]\n",
           "    out = [first]\n    return out\n",
           "the reads Inductor fuses into an embedding gradient's scatter count at the fill "
           "before it, where the fence goes (else the fence stores the scatter's values and "
           "splits its kernel)", "cpu",
           ("tests/test_fence.py::test_fences_cost_no_kernel",)),
    Mutant("fence-order-unchecked", "fxslots/_torch/inductor.py",
           "    if fake and not split and getattr(config, \"reorder_for_peak_memory\", False):",
           "    if False:",
           "gradients stay out of the arena under an Inductor whose memory reordering may drop a "
           "fence's weak dependencies", "cpu",
           ("tests/test_fence.py::"
            "test_an_inductor_that_may_not_keep_the_fences_order_keeps_the_buffer",)),
    Mutant("aligned-inputs-assumed-fenced", "fxslots/_torch/inductor.py",
           "    if getattr(config, \"assume_aligned_inputs\", False):",
           "    if False:",
           "gradients stay out of the arena under Inductor when it assumes inputs aligned (a "
           "misaligned written input is then run on a copy copied back over the gradient)", "cpu",
           ("tests/test_fence.py::"
            "test_an_inductor_that_may_not_keep_the_fences_order_keeps_the_buffer",)),
    Mutant("fallback-imports-passes", "fxslots/fallback.py",
           "from .errors import CaptureError, UnsupportedGraphError, failure_reason, gist",
           "from .errors import CaptureError, UnsupportedGraphError, gist\n"
           "from .passes.observe import failure_reason",
           "no import cycle through a package's __init__ (fallback importing passes closed "
           "attention -> fallback -> passes -> routes -> out_variants -> attention)", "cpu",
           ("tests/test_architecture.py::test_no_import_cycle_among_fxslots_modules",)),
    Mutant("zero-bubble-compiled-over-freed-nodes", "fxslots/pipelining/__init__.py",
           "    hazard = _torch.split_backward_hazard() if split else None",
           "    hazard = None",
           "compile_stages refuses a zero-bubble schedule on a torch that frees a compiled "
           "stage's autograd node before the weight step reads it (2.11, 2.12)", "cpu",
           ("tests/test_pipeline_schedules.py::"
            "test_zero_bubble_is_refused_where_torch_frees_the_weight_steps_nodes",)),
    Mutant("factory-kwargs-into-out-form", DELIVER,
           "    root.target, root.kwargs = out_op, {**out_kwargs(out_op, root.kwargs), name: buf}",
           "    root.target, root.kwargs = out_op, {**root.kwargs, name: buf}",
           "a factory's temporary computed into given memory is called without the dtype and "
           "device its out= form does not take", "cpu",
           ("tests/test_borrow.py::test_a_factory_temporary_is_computed_into_the_arena",)),
    Mutant("full-output-buffer-kept-after-placing", REGION,
           "            release(self.outputs_for(params), drop)\n",
           "            pass\n",
           "the output buffer of backwards that place no gradient in the arena is freed once "
           "one does (Inductor's warm-up filled it: llama-large's 0.92 GiB, H200 run 42a)", "cpu",
           ("tests/test_overlay.py::"
            "test_the_buffer_a_loop_no_longer_needs_is_freed_once_and_its_graphs_forgotten",
            "tests/test_fence.py::test_inductor_gradients_land_in_the_arena_and_stay_there")),
    Mutant("placed-buffer-kept-for-a-loop-that-keeps-gradients", REGION,
           "            if self.grads_kept:\n                release(",
           "            if False:\n                release(",
           "the buffer and graphs of backwards that place gradients in the arena go once the "
           "loop is seen keeping gradients", "cpu",
           ("tests/test_overlay.py::"
            "test_the_buffer_a_loop_no_longer_needs_is_freed_once_and_its_graphs_forgotten",
            "tests/test_deliver_forward.py::"
            "test_a_moved_buffer_leaves_no_stale_graph_in_any_shape")),
    Mutant("full-buffer-freed-again-after-an-unplaced-backward", REGION,
           "                self._placing[params] = True\n",
           "                pass\n",
           "the full output buffer is freed at most once unless no unplaced backward needed it "
           "since (else layouts free, grow and capture in turn)", "cpu",
           ("tests/test_overlay.py::"
            "test_the_buffer_a_loop_no_longer_needs_is_freed_once_and_its_graphs_forgotten",)),
    Mutant("buffers-released-inside-prepare", REGION,
           "        if state.preparing:\n            return\n        if not placed:",
           "        if not placed:",
           "prepare keeps both output buffers and the graphs it captured over each", "cpu",
           ("tests/test_overlay.py::"
            "test_the_buffer_a_loop_no_longer_needs_is_freed_once_and_its_graphs_forgotten",
            "tests/test_overlay.py::test_after_prepare_a_loop_that_drops_gradients_captures_"
            "nothing")),
    Mutant("memset-kernel-short-of-its-last-elements", MEMSETS,
           "blocks=-(-count // THREADS)", "blocks=count // THREADS",
           "a memset's kernel node has a thread for every element it writes", "cpu",
           ("tests/test_memsets.py::test_a_memset_is_one_thread_an_element_over_its_rows",)),
    Mutant("memset-kernel-takes-bulk-clears", MEMSETS,
           "if m.nbytes > MAX_BYTES:", "if False:",
           "memsets above MAX_BYTES stay memset nodes", "cpu",
           ("tests/test_memsets.py::"
            "test_a_memset_the_kernel_does_not_suit_stays_and_says_why",)),
    Mutant("swapped-memset-loses-its-readers", MEMSETS,
           "        for o in after:\n", "        for o in []:\n",
           "a memset's kernel node runs before every node that ran after the memset", "cpu",
           ("tests/test_memsets.py::test_swapped_memsets_keep_their_place_in_the_graph",)),
    Mutant("refused-swap-left-half-done", MEMSETS,
           "            api.destroy(new)\n", "            pass\n",
           "a swap refused half way is undone: no kernel node writes beside its memset", "cpu",
           ("tests/test_memsets.py::test_a_refused_swap_is_undone_and_named",)),
    Mutant("misaligned-memset-swapped", MEMSETS,
           "if m.dst % m.element_size or", "if False and m.dst % m.element_size or",
           "a memset whose elements are not aligned to their size stays a memset node", "cpu",
           ("tests/test_memsets.py::"
            "test_a_memset_the_kernel_does_not_suit_stays_and_says_why",)),
    Mutant("memset-kernel-stores-one-byte", MEMSET_KERNEL,
           "  st.global.u32 [%rd10], %r1;", "  st.global.u8 [%rd10], %rs1;",
           "the kernel a memset node becomes writes every byte of each element", "cuda",
           ("tests/test_cuda_memsets.py::"
            "test_cuda_swapped_memsets_write_their_bytes_before_what_reads_them",)),
    Mutant("failed-rewrite-fails-the-capture", POOL,
           "except Exception as e:  # noqa: BLE001 - the rewrite must never stop training",
           "except ZeroDivisionError as e:",
           "a graph whose memset rewrite fails is captured again as it comes, not an error",
           "cpu",
           ("tests/test_memsets.py::"
            "test_a_graph_whose_rewrite_fails_is_captured_again_as_it_comes",)),
    Mutant("kept-graph-emptied-before-instantiation", POOL,
           """            found = memsets.as_kernels(raw, index)
            graph.instantiate()
            state.counters["kept_graph_nodes_released"] += memsets.release(raw, index)""",
           """            found = memsets.as_kernels(raw, index)
            state.counters["kept_graph_nodes_released"] += memsets.release(raw, index)
            graph.instantiate()""",
           "a kept graph is emptied only after it is instantiated (before, the instantiation "
           "would run nothing)",
           "cpu",
           ("tests/test_memsets.py::"
            "test_the_capturer_empties_a_kept_graph_after_instantiating_it",)),
    Mutant("kept-graph-refusal-raises", MEMSETS,
           "        log.debug(\"memsets: a kept graph keeps its nodes after %d (%s: %s)\", destroyed,",
           "        raise\n        log.debug(\"memsets: a kept graph keeps its nodes after %d (%s: %s)\", destroyed,",
           "a kept graph the driver will not empty is kept whole, not an error",
           "cpu",
           ("tests/test_memsets.py::"
            "test_an_instantiated_kept_graph_is_emptied_and_a_refusal_only_keeps_nodes",)),
    Mutant("inductor-reorders-offload-joins", KERNELS,
           "static_input_idxs=list(static), keep_order=carries_copies(gm))",
           "static_input_idxs=list(static), keep_order=False)",
           "a forward with side-stream copies compiles in fxslots' order: Inductor's "
           "memory-driven reordering would hoist every offload join to its copy's start",
           "cpu",
           ("tests/test_inductor.py::"
            "test_inductor_keeps_the_offload_joins_where_the_plan_put_them",)),
    Mutant("fused-chain-charged-per-node", COSTS,
           "    fusion = Fusion.of(gm) if caps.fused else None",
           "    fusion = None",
           "under kernels=\"inductor\" the cost model charges a fused kernel once, not each "
           "ATen node in it",
           "cpu",
           ("tests/test_offload.py::"
            "test_under_inductor_a_fused_chain_costs_one_pass_and_one_floor",)),
    Mutant("lazy-conjugate-slotted", "fxslots/passes/collect.py",
           "            why = host_read_seed(node) or lazy_bit(node, _tensor_val(node))",
           "            why = host_read_seed(node)",
           "a saved lazy conjugate (or negative) view falls back: a slot view drops the bit",
           "cpu",
           ("tests/test_fallback.py::test_a_saved_lazy_conjugate_falls_back",)),
    Mutant("scratch-resized-whatever-its-layout", "fxslots/passes/layouts.py",
           "        if not _contiguous(v, ranges):", "        if False:",
           "an output nobody saves, of symbolic size and not contiguous, is not given scratch "
           "the out= kernel resizes contiguously", "cpu",
           ("tests/test_numerics.py::"
            "test_an_unsaved_output_keeps_its_layout_at_symbolic_sizes",)),
    Mutant("empty-batch-host-arena-unviewed", LAYOUT,
           "                      host_nbytes=max(evaluate(plan.host_capacity, env), min(n_host, 1)),",
           "                      host_nbytes=evaluate(plan.host_capacity, env),",
           "a zero-size batch's host views still view an arena", "cpu",
           ("tests/test_offload.py::test_an_empty_batch_offloads_nothing_and_trains",)),
    Mutant("parameter-sets-known-by-first", VARIANT,
           "            params = hash((id(anchors[0]), id(anchors[1])))",
           "            params = hash((id(anchors[0]), id(anchors[0])))",
           "a parameter set is known by its first and last parameter: blocks sharing their first "
           "keep slots of their own", "cpu",
           (f"{STAND_IN}::test_blocks_that_share_a_parameter_keep_their_slots_and_exact_gradients",)),
    Mutant("shared-parameter-added-in-graph", FEEDS,
           "        related = self.region.related.get(key, (key,))",
           "        related = (key,)",
           "parameter sets that share a parameter leave adding into .grad to autograd", "cpu",
           ("tests/test_accumulate.py::"
            "test_parameter_sets_that_share_a_parameter_leave_accumulation_to_autograd",)),
    Mutant("inference-keyed-by-shape-alone", INFERENCE,
           "        return (*(id(args[i]) for i in self._anchors),",
           "        return (*(),",
           "an inference graph serving several modules captures once per module", "cpu",
           ("tests/test_inference_graphs.py::"
            "test_blocks_compiled_one_by_one_capture_an_inference_graph_each",)),
    Mutant("inference-graph-outlives-its-module", INFERENCE,
           "        for i in dict.fromkeys(self._anchors):",
           "        for i in ():",
           "an inference graph goes with the module it was captured for", "cpu",
           ("tests/test_inference_graphs.py::"
            "test_an_inference_graph_goes_with_the_module_it_was_captured_for",)),
    Mutant("reused-set-key-taken-for-the-dead-set", REGION,
           "        if key in self.param_sets and self._noted(args[indices[0]]):\n",
           "        if key in self.param_sets:\n",
           "a set key whose ids new parameters reuse notes the new parameters", "cpu",
           ("tests/test_runtime.py::"
            "test_a_parameter_set_is_noted_again_when_its_key_names_new_parameters",)),
    Mutant("first-run-copies-an-expanded-output-as-it-is", OUTPUTS,
           "outs[j] = torch.empty_strided(o.shape, copy_strides(o),",
           "outs[j] = torch.empty_strided(o.shape, o.stride(),",
           "an expanded output viewing the slot is copied out dense at an uncaptured run",
           "cpu", ("tests/test_graph_executor_cpu.py::"
                   "test_an_expanded_output_is_copied_out_dense",)),
    Mutant("mixed-norm-statistics-typed-as-the-fake-says", RETYPE,
           "            retyped |= _retype(node)",
           "            pass",
           "a mixed-dtype norm's statistics get the fp32 slots its ATen kernel writes", "cpu",
           ("tests/test_numerics.py::test_a_mixed_dtype_norm_keeps_its_statistics_in_fp32",)),
    Mutant("grad-buffer-typed-as-the-gradient", ACCUMULATE,
           'b.meta["val"] = _buffer_value(outs[i].meta.get("val"), p)',
           'b.meta["val"] = outs[i].meta.get("val")',
           "an accumulating twin's .grad buffers have the parameter's layout contract", "cpu",
           ("tests/test_accumulate.py::"
            "test_a_grad_buffer_has_its_parameters_layout_under_inductor",)),
    Mutant("grad-strides-unchecked", AUTOGRAD,
           "            and obeys_grad_layout(param, grad))",
           "            )",
           "a .grad out of autograd's layout contract is left to autograd", "cpu",
           ("tests/test_accumulate.py::"
            "test_a_grad_out_of_its_parameters_layout_is_left_to_autograd",
            "tests/test_accumulate.py::"
            "test_a_grad_restrided_at_its_address_is_added_as_autograd_does")),
    Mutant("frozen-parameter-added-into", AUTOGRAD,
           "        if g is None or not p.requires_grad:",
           "        if g is None:",
           "a parameter frozen since its forward gets nothing added into its .grad", "cpu",
           ("tests/test_accumulate.py::"
            "test_a_parameter_frozen_before_its_backward_keeps_its_grad",)),
    Mutant("slot-in-backward-looks-orphaned", RING,
           "                    s.node = None\n",
           "                    pass\n",
           "a slot its backward is reading is never taken as orphaned by another thread", "cpu",
           ("tests/test_threads.py::"
            "test_a_slot_in_its_backward_is_never_taken_by_another_thread",)),
    Mutant("release-gives-back-another-microbatchs-slot", RING,
           "            if saved is not None and not slot.owns(saved):",
           "            if False:",
           "a backward gives back its slot only while its microbatch still holds it", "cpu",
           ("tests/test_runtime.py::"
            "test_a_backward_gives_back_only_the_slot_its_microbatch_still_holds",)),
    Mutant("new-holder-keeps-the-old-node", RING,
           "            slot.node, slot.retained = node, False\n",
           "            slot.node, slot.retained = node or slot.node, False\n",
           "a forward taking a slot never inherits the node of the forward before it", "cpu",
           ("tests/test_runtime.py::"
            "test_views_outliving_their_autograd_graph_keep_the_old_arenas_and_the_slot_"
            "takes_new",)),
    Mutant("own-kernel-scratch-refused", COLLECT,
           "route.op is not None and route.op not in OWN_KERNELS",
           "route.op is not None",
           "fxslots' own attention kernel keeps its route at symbolic sizes (it lays out its "
           "scratch itself)", "cpu",
           ("tests/test_attention.py::"
            "test_attention_of_symbolic_size_writes_logsumexp_by_its_own_kernel",)),
    Mutant("schedule-eval-with-grad", "fxslots/pipelining/schedules.py",
           "            cls.eval = _evaluating(evaluate)",
           "            pass",
           "every schedule's eval over a stage compile_stages compiled runs under no_grad (it "
           "holds no slots), a later schedule's built on the compiled stage too", "cpu",
           ("tests/test_pipeline_schedules.py::test_the_schedules_own_eval_runs_between_steps",
            "tests/test_pipeline_schedules.py::test_a_later_schedules_eval_over_the_compiled_"
            "stage_holds_no_slots")),
    Mutant("budget-ignores-alignment", PLAN,
           "            out[g.id] = sympy.sympify(align_up(p.nbytes, alignment))\n",
           "            out[g.id] = sympy.sympify(p.nbytes)\n",
           "a budget counts each kept group at its aligned bytes in the device arena", "cpu",
           ("tests/test_offload.py::test_a_budget_counts_each_group_at_what_it_holds_of_the_"
            "arena",)),
    Mutant("budget-not-bounded-to-its-shape", OFFLOADING,
           '        if policy in (offload_auto, offload_budget) and not made["unmet"]:\n',
           '        if policy is offload_auto and not made["unmet"]:\n',
           "a dynamic graph a budget planned runs shapes up to the one it was weighed at", "cpu",
           ("tests/test_offload.py::test_a_budget_holds_at_every_shape_under_dynamic_shapes",)),
    Mutant("above-weighs-another-size", OFFLOADING,
           "        n, at = ctx.sizes[g.id], sizes_text(ctx.hints, g.nbytes.free_symbols)\n",
           "        n, at = bytes_at(saved, g.nbytes, {}), sizes_text(ctx.hints, "
           "g.nbytes.free_symbols)\n",
           "above:<bytes> weighs each group at the sizes being compiled", "cpu",
           ("tests/test_offload.py::test_above_decides_at_the_sizes_compiled",)),
    Mutant("unmet-budget-silent", OFFLOADING,
           '            warnings.warn(made["unmet"], stacklevel=2)\n', "            pass\n",
           "a budget the plan cannot meet warns, naming the bytes that stay and why", "cpu",
           ("tests/test_offload.py::test_a_group_no_policy_can_move_says_why_and_an_unmet_"
            "budget_warns",)),
    Mutant("unmovable-group-unexplained", OFFLOADING,
           '                decisions[g.id] = (False, f"{label}: {why_not_offloadable(saved, g)}")\n',
           "                pass\n",
           "a group no offload policy can move says why it stays on the device", "cpu",
           ("tests/test_offload.py::test_a_group_no_policy_can_move_says_why_and_an_unmet_"
            "budget_warns",)),
    Mutant("moved-grads-pile-up", "fxslots/runtime/cudagraphs/executor.py",
           "        if old is not None and not state.preparing:  # .grad given new memory; not "
           "prepare's",
           "        if False:",
           "a graph adding into .grad buffers the loop gave new memory is dropped and counted as "
           "a recapture (graphs stay bounded)", "cpu",
           (f"{STAND_IN}::test_grad_given_new_memory_each_step_keeps_the_graphs_bounded",)),
    Mutant("json-view-offset-in-elements", "fxslots/report.py",
           '            "byte_offset": str(v.storage_offset * v.dtype.itemsize)}',
           '            "byte_offset": str(v.storage_offset)}',
           "the JSON plan gives each view's place in bytes from the arena's first byte", "cpu",
           ("tests/test_plot.py::test_json_plan_round_trips",)),
    Mutant("backward-constants-listed-recomputed", "fxslots/passes/recompute.py",
           "            if forward is None or n in forward:",
           "            if True:",
           "only ops the forward's outputs need are listed as recomputed in backward", "cpu",
           ("tests/test_numerics.py::test_only_forward_ops_are_listed_as_recomputed",)),
    Mutant("staged-bytes-with-gaps", "fxslots/schemas/__init__.py",
           "        return sympy.Add(*[compact_elements(v.shape, v.stride) * v.dtype.itemsize",
           "        return sympy.Add(*[span_elements(v.shape, v.stride) * v.dtype.itemsize",
           "staged inputs count the bytes their copies move, not the span with its gaps", "cpu",
           (f"{STAND_IN}::test_staged_inputs_count_as_copies",)),
    Mutant("later-schedule-slots-unchecked", "fxslots/pipelining/schedules.py",
           "        if need > c.slots:",
           "        if False:",
           "a later schedule needing more slots than its compiled stage has is refused before "
           "its step runs anything", "cpu",
           ("tests/test_pipeline_schedules.py::test_a_later_schedule_needing_more_slots_is_"
            "refused_before_it_runs",)),
    Mutant("auto-guard-pins-a-marked-size", OFFLOADING,
           "                   if _torch.symbol_range(ctx.shape_env, s)[0] < ctx.hints[s]]",
           "                   if True]",
           "auto never guards a size marked dynamic down to its least value", "cpu",
           ("tests/test_offload.py::test_auto_leaves_a_range_the_user_gave_unguarded",)),
    Mutant("predicate-sees-symbolic-sizes", OFFLOADING,
           "predicate(at_sizes(saved.tensor(m), ctx.hints))",
           "predicate(saved.tensor(m))",
           "an offload predicate sees the sizes being compiled for, not symbols", "cpu",
           ("tests/test_offload.py::test_a_predicate_over_sizes_decides_at_the_shape_compiled",)),
    Mutant("norm-policy-reads-none", POLICIES,
           "    return (out is not None and isinstance(first, torch.Tensor)",
           "    return (first.device is not None and out is not None",
           "the norm recompute policy reads no device off another op's outputs (None among them)",
           "cpu",
           ("tests/test_numerics.py::"
            "test_a_custom_op_updating_an_intermediate_keeps_its_slots",)),
    Mutant("replay-hands-back-one-parameter-view", OUTPUTS,
           "            result[j] = result[j].alias()\n",
           "            result[j] = vars(result[j]).setdefault('once', result[j].alias())\n",
           "a replay hands out a new tensor for an output over a parameter's bytes", "cpu",
           ("tests/test_graph_executor_cpu.py::"
            "test_an_output_viewing_a_parameter_is_a_new_tensor_at_each_replay",)),
    Mutant("batch-norm-out-over-a-sparse-input", "fxslots/routes.py",
           "    if (sparse := _sparse_input(target, device_type, args)) is not None:\n",
           "    if False:\n",
           "batch norm's out= kernel never writes the result of an input not dense in a memory "
           "format", "cpu",
           ("tests/test_routes.py::test_batch_norm_writes_into_the_slot_only_over_a_dense_input",)),
    Mutant("explain-joins-earlier-regions", STATE,
           "    outer, regions = regions, weakref.WeakValueDictionary()\n",
           "    outer = regions\n",
           "explain's step joins no region of an earlier compile", "cpu",
           ("tests/test_backend.py::"
            "test_explain_leaves_no_compile_behind_and_joins_no_earlier_region",)),
    Mutant("explain-leaves-its-compile", "fxslots/report.py",
           "    finally:\n        torch.compiler.reset()\n",
           "    finally:\n        pass\n",
           "explain leaves nothing of its compile in Dynamo's cache", "cpu",
           ("tests/test_backend.py::"
            "test_explain_leaves_no_compile_behind_and_joins_no_earlier_region",)),
    Mutant("prepare-restores-rebound-buffers-by-object", "fxslots/prepare.py",
           "                    setattr(m, name, b)  # a forward may rebind it",
           "                    pass  # a forward may rebind it",
           "prepare and explain put back a buffer the forward rebinds", "cpu",
           ("tests/test_prepare.py::test_buffers_a_forward_rebinds_are_put_back",)),
    Mutant("prepare-takes-any-slots", "fxslots/prepare.py",
           "    if type(slots) is not int or slots < 1:\n",
           "    if False:\n",
           "prepare refuses slots that are not an int >= 1 before anything runs", "cpu",
           ("tests/test_prepare.py::"
            "test_prepare_refuses_arguments_that_cannot_mean_what_it_does",)),
    Mutant("plan-weighs-only-ranged-symbols", PLAN,
           "    env = next(symbol_values(ranges, free, points=(\"high\",)), {})\n",
           "    env = next(symbol_values(ranges, points=(\"high\",)), {})\n",
           "the plan weighs a root's bytes at a data-dependent size too (no fallback)", "cpu",
           ("tests/test_fallback.py::"
            "test_a_saved_element_of_a_data_dependent_tensor_keeps_the_slots",)),
    Mutant("cli-takes-ungenerated-dtypes", "fxslots/cli.py",
           "    if key not in _GENERATED:",
           "    if False:",
           "the CLI refuses a dtype it cannot make random inputs of, before anything runs", "cpu",
           ("tests/test_cli.py::test_bad_command_lines_in_process",)),
    Mutant("slotless-forward-feeds-nothing", VARIANT,
           "                self.feeds.note(args, self.accumulate.indices, _torch.calling_node(), "
           "None)",
           "                pass",
           "a forward that takes no slot still counts as feeding its parameters' .grad", "cpu",
           ("tests/test_accumulate.py::test_a_graph_saving_nothing_still_counts_as_feeding_its_"
            "parameters",)),
    Mutant("eager-feeder-unseen", AUTOGRAD,
           "                    got is None or got.data_ptr() != mine.data_ptr()))",
           "                    False))",
           "a backward that makes .grad watches whether code outside fxslots feeds the "
           "parameter too (then autograd adds, once)", "cpu",
           ("tests/test_feeds.py::test_a_parameter_eager_code_feeds_too_is_accumulated_by_"
            "autograd[penalty-False]",)),
    Mutant("watched-gradient-not-held", AUTOGRAD,
           "        held, param = [g], weakref.ref(p)",
           "        held, param = [type('Ptr', (), {'data_ptr': lambda _, v=g.data_ptr(): v})()"
           "], weakref.ref(p)",
           "the watched gradient is held until its accumulator runs (no sum in place into it)",
           "cpu", ("tests/test_feeds.py::test_a_watched_gradient_is_held_so_a_sum_never_keeps_"
                   "its_address[embedding-too]",)),
    Mutant("eager-feeder-never-forgotten", STATE,
           "        feeders.discard(OUTSIDE)",
           "        pass",
           "a parameter found fed by its compiled graph alone again adds in the graph again",
           "cpu", ("tests/test_feeds.py::test_a_penalty_dropped_lets_backwards_add_in_the_graph_"
                   "again",)),
    Mutant("in-graph-adds-never-watched", FEEDS,
           '        if self._due("_adds"):',
           "        if False:",
           "a backward that adds into .grad itself watches for a feeder outside fxslots that "
           "starts while .grad persists", "cpu",
           ("tests/test_feeds.py::test_a_feeder_that_starts_and_stops_with_grad_kept_is_seen",)),
    Mutant("outside-feeder-never-rechecked", FEEDS,
           "        if (kept and not _fed_outside(params)) or not self._due(",
           "        if kept or not self._due(",
           "with .grad kept, a parameter left to autograd for an outside feeder is watched "
           "again: once the feeder stops, the adds return to the graph", "cpu",
           ("tests/test_feeds.py::test_a_feeder_that_starts_and_stops_with_grad_kept_is_seen",)),
    Mutant("added-gradient-watch-sees-nothing", AUTOGRAD,
           "                report(p, got is not None if mine is None else (",
           "                report(p, False if mine is None else (",
           "an accumulator that gets a gradient after its backward added into .grad itself "
           "has another feeder", "cpu",
           ("tests/test_feeds.py::test_a_feeder_that_starts_and_stops_with_grad_kept_is_seen",)),
    Mutant("first-backward-not-watched", VARIANT,
           "        elif self.backward_graph is None:  # which parameters it feeds is yet unknown",
           "        elif False:",
           "training's first backward (before any forward knew its parameters) is watched too",
           "cpu", ("tests/test_feeds.py::test_a_parameter_eager_code_feeds_too_is_accumulated_by_"
                   "autograd[penalty-False]",)),
    Mutant("first-forwards-unknown-to-watch", FEEDS,
           "        if fed and slot.node is not None:",
           "        if False:",
           "a first step's two forwards of one pass are not taken for code outside fxslots",
           "cpu", ("tests/test_accumulate.py::"
                   "test_two_backwards_of_one_pass_leave_accumulation_to_autograd[nested]",)),
    Mutant("moved-block-shares-for-good", REGION,
           "        if not keys or self.nodes_unknown:\n            return bool(keys)",
           "        if True:\n            return bool(keys)",
           "another region's feeder counts only where its forward is in this backward pass",
           "cpu", ("tests/test_feeds.py::test_a_block_that_moves_to_another_graph_keeps_adding_"
                   "in_the_graph[eager]",)),
    Mutant("overlapping-grads-added-at-once", AUTOGRAD,
           "        if not all(map(_same_layout, params, grads)) or _overlapping(grads):",
           "        if not all(map(_same_layout, params, grads)):",
           "two .grad buffers that share bytes are left to autograd (one multi-tensor add would "
           "write both at once)", "cpu",
           ("tests/test_accumulate.py::test_grads_sharing_bytes_are_left_to_autograd[alias]",
            "tests/test_accumulate.py::test_one_buffer_at_two_parameters_is_left_to_autograd",
            "tests/test_accumulate.py::test_weights_tied_after_compiling_leave_accumulation_to_"
            "autograd")),
    Mutant("watch-never-rests", FEEDS,
           "        return n <= WATCH_FIRST or not n % WATCH_EVERY",
           "        return True",
           "after its first backwards a variant watches one backward in WATCH_EVERY (host cost)",
           "cpu", ("tests/test_feeds.py::test_a_late_feeder_is_seen_within_watch_every_steps",)),
    Mutant("captured-constants-keep-the-model", "fxslots/runtime/cudagraphs/outputs.py",
           "        return cls(weakref.ref(static), o.untyped_storage(), o.dtype, tuple(o.shape),",
           "        return cls(lambda s=static: s, o.untyped_storage(), o.dtype, tuple(o.shape),",
           "a captured graph's constant outputs (saved parameters) hold their parameter weakly: "
           "a deleted model frees its weights, arenas and graphs", "cpu",
           (f"{STAND_IN}::test_deleting_a_model_frees_its_arenas_graphs_and_weights",)),
    Mutant("parameter-sets-named-by-address", VARIANT,
           "            params = hash((id(anchors[0]), id(anchors[1])))",
           "            params = hash((anchors[0].data_ptr(), anchors[1].data_ptr()))",
           "a parameter set is named by its anchors' identity, which a moved parameter keeps "
           "(its graphs are captured again, not piled up under new keys)", "cpu",
           ("tests/test_graph_executor_cpu.py::test_a_moved_parameter_is_captured_again",)),
    Mutant("dead-parameter-set-keeps-its-graphs", REGION,
           '        _on_death(self, anchors, "_forget_set", params)',
           "        pass",
           "a dead model's graphs and output buffers go while a sibling model keeps the region",
           "cpu", (f"{STAND_IN}::test_a_dead_models_graphs_go_while_a_sibling_lives",)),
    Mutant("dead-parameter-set-stays-related", REGION,
           '            _on_death(self, (args[indices[0]], args[indices[-1]]), "_forget_params", '
           'key)',
           "            pass",
           "a dead model's parameter set leaves the region's record of sets", "cpu",
           (f"{STAND_IN}::test_a_dead_models_graphs_go_while_a_sibling_lives",)),
    Mutant("many-shapes-never-noted", "fxslots/runtime/cudagraphs/banks.py",
           "        if len(shapes) == SHAPES_NOTED:",
           "        if False:",
           "a variant's SHAPES_NOTED-th distinct captured shape warns, once", "cpu",
           (f"{STAND_IN}::test_many_distinct_shapes_warn_once",)),
    Mutant("per-block-exhaustion-unexplained", "fxslots/runtime/ring.py",
           '               f"in flight. " if len(sets) > 1 and params else "")',
           '               f"in flight. " if False else "")',
           "a ring exhausted by blocks sharing one compiled graph says how many modules hold "
           "it", "cpu", ("tests/test_bad_inputs.py::"
                         "test_too_many_forwards_in_flight_per_block_names_the_modules",)),
    Mutant("non-leaf-grad-read", AUTOGRAD,
           "        g = None if p is None or not p.is_leaf else p.grad",
           "        g = None if p is None else p.grad",
           "a non-leaf in a parameter's place (functional_call) is not asked for .grad", "cpu",
           ("tests/test_feeds.py::test_a_non_leaf_in_a_parameters_place_is_not_asked_for_grad",)),
    Mutant("non-leaf-grad-watched", FEEDS,
           "        if not params or any(p is None or not p.is_leaf for p in params):",
           "        if not params or any(p is None for p in params):",
           "the watch asks no non-leaf in a parameter's place for .grad", "cpu",
           ("tests/test_feeds.py::test_a_non_leaf_in_a_parameters_place_is_not_asked_for_grad",)),
    Mutant("retained-slot-never-grows", "fxslots/runtime/ring.py",
           "                s.retained and s.pending() for s in self.slots):",
           "                False for s in self.slots):",
           "a forward finding a slot held by a retained graph takes a new slot", "cpu",
           ("tests/test_bad_inputs.py::"
            "test_a_loop_passing_retain_graph_by_habit_trains_in_two_slots",)),
    Mutant("retained-backward-unmarked", VARIANT,
           "                slot.retained = True",
           "                pass",
           "a backward that keeps its graph marks its slot retained", "cpu",
           ("tests/test_bad_inputs.py::"
            "test_a_loop_passing_retain_graph_by_habit_trains_in_two_slots",)),
    Mutant("vmapped-backward-staged", EXECUTOR,
           "        if any(_torch.is_batched(args[i]) for i in tangents):",
           "        if False:",
           "a backward under vmap (batched tangents) runs uncaptured", "cpu",
           (f"{STAND_IN}::test_a_backward_under_vmap_runs_uncaptured",)),
    Mutant("vmapped-backward-watched", REGION,
           "                and not _torch.is_batched(grad)):  # under vmap: nothing the loop keeps",
           "                ):",
           "a backward under vmap learns nothing from its batched gradients", "cpu",
           (f"{STAND_IN}::test_a_backward_under_vmap_runs_uncaptured",)),
    Mutant("recording-backward-adds-in-graph", VARIANT,
           "            grads = None if recording else self._grad_buffers(slot)",
           "            grads = self._grad_buffers(slot)",
           "a create_graph=True backward leaves .grad to autograd, which records its add", "cpu",
           ("tests/test_bad_inputs.py::test_create_graph_with_grad_kept_records_like_aot_eager",)),
    Mutant("create-graph-unlinked-silent", VARIANT,
           "        if recording and self.unlinked:",
           "        if False:",
           "a create_graph=True backward whose gradients are not linked to some inputs warns",
           "cpu", ("tests/test_bad_inputs.py::"
                   "test_a_gradient_penalty_restricted_to_parameters_is_not_silent",)),
    Mutant("create-graph-unseen", AUTOGRAD,
           '        if ("double_ctx" in code.co_varnames[:code.co_argcount]',
           "        if (False",
           "a backward inside AOTAutograd's double-backward function records a graph", "cpu",
           ("tests/test_bad_inputs.py::"
            "test_a_gradient_penalty_restricted_to_parameters_is_not_silent",)),
    Mutant("retained-backward-taken-for-create-graph", AUTOGRAD,
           '                and frame.f_locals.get("double_ctx") is not None):',
           "                and True):",
           "a plain backward with retain_graph=True is not taken for create_graph=True", "cpu",
           ("tests/test_bad_inputs.py::"
            "test_two_heads_backpropagated_one_by_one_are_not_taken_for_create_graph",)),
    Mutant("forward-outputs-share-one-buffer", "fxslots/runtime/cudagraphs/outputs.py",
           "        if out is None and (self.own or len(pool) == 1):  # one allocation each, one copy",
           "        if out is None and len(pool) == 1:  # one allocation each, one copy",
           "a replayed forward's outputs each get memory of their own", "cpu",
           (f"{STAND_IN}::test_a_forwards_outputs_are_the_callers_own",)),
    Mutant("delivered-outputs-are-views", "fxslots/runtime/cudagraphs/outputs.py",
           "                if self.own and kind is OutKind.BUFFER:  # the caller's: not views of "
           "one base",
           "                if False:",
           "a forward's outputs delivered into its output buffer are tensors of their own, not "
           "views", "cpu", ("tests/test_deliver_forward.py::"
                            "test_delivered_outputs_can_be_changed_in_place",)),
    Mutant("buffers-name-the-module", "fxslots/policies.py",
           "    params = [i for i in candidates if isinstance(args[i], torch.nn.Parameter)] or "
           "list(candidates)",
           "    params = list(candidates)",
           "parameters, not a buffer the forward may rebind, name a module", "cpu",
           ("tests/test_graph_executor_cpu.py::test_a_buffer_the_forward_rebinds_does_not_name_"
            "the_module", "tests/test_inference_graphs.py::test_a_buffer_the_forward_rebinds_"
            "keeps_its_module_named")),
)
