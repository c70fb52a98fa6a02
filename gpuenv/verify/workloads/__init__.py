"""Model-shaped training workloads (CV, NLP, recommender) with random data and weights, sized by
device and level, and the helpers the torch checks share (common.py: devices, CUDA problems, figures judged
against baselines; throughput.py: timed matmul and copy figures). Importing this package imports no torch:
the builders import it inside."""
