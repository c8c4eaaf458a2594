"""A buggy throughput logger: Megatron-Bridge before #3839 / PaLM convention: attention work counted as pack_length² per pack instead of Σ sᵢ² of the real documents.
`thdcheck fuzz logger` finds it and shrinks it to a one-document step."""

import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import logger  # noqa: E402

logger.BUG = "pack_length_squared"

if __name__ == "__main__":
    logger.serve_logger(logger.log)
