# binlog-relay: a static binary on a small base image.
#   docker build --build-arg VERSION=v1.2.3 --build-arg COMMIT=$(git rev-parse --short HEAD) .
# (make image does this.) `binlog-relay version` prints both.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o /out/binlog-relay ./cmd/binlog-relay

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/binlog-relay /usr/local/bin/binlog-relay
ENTRYPOINT ["/usr/local/bin/binlog-relay"]
CMD ["run", "--config", "/etc/binlog-relay/relay.yaml"]
