"""Deployment artifacts (k8s/, docker/, monitoring, protos) checked with the tools users run."""
