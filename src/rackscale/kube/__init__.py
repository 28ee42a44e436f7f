"""The Kubernetes secondary scheduler (needs the ``kube`` extra: ``pip install rackscale[kube]``)."""
