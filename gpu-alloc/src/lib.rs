//! GPU monitoring, VRAM lease ledger, model pool and a swap-cost-aware allocator for HOROS.
