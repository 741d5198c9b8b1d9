"""A third-party byoc backend: claims Neg, runs it with numpy."""
