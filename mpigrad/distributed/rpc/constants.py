"""Timeouts, as torch.distributed.rpc.constants names them (seconds)."""
DEFAULT_RPC_TIMEOUT_SEC = 60.0
UNSET_RPC_TIMEOUT = -1.0  # "use the agent's default"; 0 means no timeout at all
DEFAULT_NUM_WORKER_THREADS = 16
