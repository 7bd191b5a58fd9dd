"""The runtime: slots, layouts, variants and their executors. Data flows one way:

``ring`` (who owns which slot's memory) -> ``layout`` (where things are at one shape) ->
``variant`` (one compiled forward/backward, taking slots and evaluating layouts) -> an executor
(``variant.EagerExecutor``, or ``cudagraphs.executor.GraphExecutor``: captured CUDA graphs on
the shared pool of ``cudagraphs.pool``). ``region`` ties a ring to what its variants share.
"""
