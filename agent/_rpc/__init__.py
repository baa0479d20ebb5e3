"""RPC mode: the NDJSON wire server (seeds/rpc.md)."""
