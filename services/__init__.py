"""graphfeed: gRPC microservices that feed GNN training.

Python namespace map (the repository's top-level folders are fixed by the client):

- ``graphfeed.common``       (services/common)       codec, errors, seeds, RPC plumbing, partition format
- ``graphfeed.ingest``       (services/ingest)       datasets -> partitioned on-disk graph
- ``graphfeed.graph_store``  (services/graph_store)  serves one partition
- ``graphfeed.sampler``      (services/sampler)      multi-hop sampling -> DGL blocks
- ``graphfeed.loader``       (services/loader)       epoch plan, cache, minibatch stream
- ``graphfeed.trainer``      (trainer/)              RemoteDataLoader and example jobs
- ``graphfeed.gpu_kernels``  (gpu_kernels/)          CuPy kernels with NumPy references
- ``graphfeed.<svc>.v1``     generated protobuf/gRPC code (``scripts/gen_proto.py``)
"""

__version__ = "0.1.0"
