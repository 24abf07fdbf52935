# syntax=docker/dockerfile:1
# trainops: one static binary on a distroless, non-root base, running
# `trainops run` by default.
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

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/trainops /trainops
USER 65532:65532
ENTRYPOINT ["/trainops"]
CMD ["run"]
