"""What GPUs this machine has: NVML on a GPU server, a simulated set elsewhere.

Discovery sits behind one small interface (`GPUSource`) so the books never
know which they got.
"""
