"""The built-in ``torch-llm`` runner: a llama-style decoder trained on synthetic tokens.

The parent side (:mod:`.runner`) needs no torch; the benchmark itself runs in a fresh child process
(``python -m ablate.workers.runners.torch_llm``) so that its peak memory is its own.
"""
