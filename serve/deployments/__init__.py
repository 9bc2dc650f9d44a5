"""The appliance's Ray Serve deployments, plain classes around the plain-Python stages; each is
bound with ``serve.deployment(...)`` by serve/appliance.py's build_app, so a test can build one
without Serve, its models or engine injected:

    Ingress    (serve/deployments/ingress.py: the app of serve/http/app.py over the Gateway)
      -> Embedder   (query embeddings: @serve.batch + LRU cache; document embeddings)
      -> Shards     (tenant shards multiplexed by tenant id, LRU; search, uploads and their
                     ingestion, files, the vector-store catalog)
      -> Generator  (the engine: vLLM AsyncLLM, prefix caching, streaming, yes/no judge)
      -> Reranker   (the relevance judge, when query.rerank.backend is cross-encoder)
"""
