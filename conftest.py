# Without a GPU, run Triton kernels through Triton's CPU interpreter. This must happen before
# anything imports a @triton.jit kernel, hence a root conftest.
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
