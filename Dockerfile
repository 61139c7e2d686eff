# binlog-relay: a static binary on a small base image.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/binlog-relay ./cmd/binlog-relay

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/binlog-relay /usr/local/bin/binlog-relay
ENTRYPOINT ["/usr/local/bin/binlog-relay"]
CMD ["run", "--config", "/etc/binlog-relay/relay.yaml"]
