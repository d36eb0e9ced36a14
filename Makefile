# Images for a registry, with ordinary tools (docs/DEPLOY.md, "Images"). The one place for the
# registry and tag on the build side; k8s/values/values.yaml is the one place on the deploy side
# (`make values` writes them there).
#   make images REGISTRY=ghcr.io/me TAG=0.1.0      # CPU image and the CUDA image (PLATFORM=linux/amd64)
#   make push   REGISTRY=ghcr.io/me TAG=0.1.0
#   make values REGISTRY=ghcr.io/me TAG=0.1.0      # point k8s/values/values.yaml (and k8s/tools/upload.yaml) at them
REGISTRY ?= ghcr.io/graphfeed
TAG ?= 0.1.0
IMAGE ?= $(REGISTRY)/graphfeed
# docker or podman: both take the same arguments.
ENGINE ?= $(shell command -v docker >/dev/null 2>&1 && echo docker || echo podman)
BUILD_ARGS ?=
# Target platform, e.g. linux/amd64 when building on an arm64 laptop for amd64 nodes (empty: the
# build machine's). The CUDA image exists for linux/amd64 only (DGL's CUDA wheels).
PLATFORM ?=
platform = $(if $(PLATFORM),--platform $(PLATFORM))

.PHONY: images image image-cuda push values demo test

images: image image-cuda

image:
	$(ENGINE) build $(platform) -f docker/Dockerfile $(BUILD_ARGS) -t $(IMAGE):$(TAG) .

image-cuda:
	$(ENGINE) build $(platform) -f docker/Dockerfile --target cuda $(BUILD_ARGS) -t $(IMAGE):$(TAG)-cuda .

push:
	$(ENGINE) push $(IMAGE):$(TAG)
	$(ENGINE) push $(IMAGE):$(TAG)-cuda

values:
	sed -i -e 's#^  image: .*#  image: $(IMAGE):$(TAG)#' -e 's#^  cudaImage: .*#  cudaImage: $(IMAGE):$(TAG)-cuda#' k8s/values/values.yaml
	sed -i -e 's#^\(      image: \)[^ ]*\(  \# values.yaml image.*\)#\1$(IMAGE):$(TAG)\2#' k8s/tools/upload.yaml

demo:
	./scripts/demo.sh

test:
	./scripts/test.sh
