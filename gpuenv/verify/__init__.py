"""`gpuenv verify`: certify a node (or an image) with checks that can fail, never hang, and say
what is wrong. See docs/verify.md."""
