"""The math, once: attention as four stages (attention.py), FlashAttention-2 in plain JAX (flash.py), and the
float64 reference built from the same code in NumPy, with the lab's tolerances (checks.py)."""
