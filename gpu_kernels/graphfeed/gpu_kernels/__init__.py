"""The GPU data path: zero-copy gather, a GPU cache tier, GPU neighbor sampling
(uniform on a CSR, and temporal: edges before a time; see README.md).

Importing the package (or any module in it) never imports CuPy; ``_cuda.gpu_available()`` says
whether the GPU path can run here.
"""
