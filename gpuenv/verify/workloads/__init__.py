"""Model-shaped training workloads (CV, NLP, recommender) with random data and weights, sized by
device and level. Importing this package imports no torch: the builders import it inside."""
