"""A valid user GPU-table entry, shared by the tests that read GPU files (the tests folder
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
