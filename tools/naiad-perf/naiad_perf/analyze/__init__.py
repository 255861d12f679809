"""naiad analyze: Model Analyzer's job for naiad (and any server with Triton's repository API).

Sweeps a model's configuration (instance count, max_batch_size, dynamic batching, backend
threads) through the repository API's config override, measures each candidate with
:func:`naiad_perf.api.measure`, and writes a ranked report, a CSV, the best config.pbtxt and a
checkpoint that an interrupted run resumes from.
"""
