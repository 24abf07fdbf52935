# syntax=docker/dockerfile:1
# trainops: one static binary on a scratch base holding what `make image`
# writes (CA certificates, a nonroot user, /tmp), running `trainops run` by
# default. The files come from the same code (go run ./hack/image files);
# the directives below match its config, which hack/image's tests check.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/trainops/trainops/internal/version.Version=${VERSION} -X github.com/trainops/trainops/internal/version.Commit=${COMMIT}" \
      -o /out/trainops ./cmd/trainops
RUN go run ./hack/image files --binary /out/trainops --out /rootfs

FROM scratch
ARG VERSION=dev
ARG COMMIT=unknown
COPY --from=build /rootfs/ /
COPY --from=build --chown=65532:65532 /rootfs/home/nonroot /home/nonroot
USER 65532:65532
ENV PATH=/ SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt HOME=/home/nonroot
LABEL org.opencontainers.image.title=trainops org.opencontainers.image.version=${VERSION} org.opencontainers.image.revision=${COMMIT} org.opencontainers.image.licenses=Apache-2.0
ENTRYPOINT ["/trainops"]
CMD ["run"]
