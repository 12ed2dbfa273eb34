"""`torchwise doctor`: checks that this install really computes (doctor.py runs them; see its docstring for
which module checks what), and what the machine offers CUDA-wise (cuda_info.py)."""
