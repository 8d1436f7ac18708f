"""Valid user GPU-table entries, shared by the tests that read GPU files (the tests folder
is on sys.path: pytest puts the root conftest's folder there)."""

MY_CARD_TOML = """
[gpus.my-card]
name = "My Card"
memory_bytes = 17_179_869_184
bandwidth_bytes_per_s = 1.0e12
compute_capability = "8.6"
sm_count = 84
tflops = { fp32 = 35.6, tf32 = 71.0, bf16 = 142.0, fp16 = 142.0 }
source = "my datasheet"
"""

TINY_CARD_TOML = """
[gpus.tiny]
name = "Tiny test GPU"
memory_bytes = 1_073_741_824         # 1 GiB, the least a GPU file may give
bandwidth_bytes_per_s = 1.0e11
compute_capability = "8.0"
sm_count = 8
tflops = { fp32 = 1.0, tf32 = 2.0, bf16 = 4.0, fp16 = 4.0 }
context_bytes = 67_108_864
source = "a test GPU"
"""
