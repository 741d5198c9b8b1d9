"""The partitioning passes, in the order the pipeline runs them (see ``byoc.pipeline``)."""
