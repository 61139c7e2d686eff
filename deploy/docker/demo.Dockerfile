# The programs of the Compose demo (examples/order-inventory): the inventory service, the
# order service and the one-shot demo. docker-compose.yml builds it.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/ ./examples/order-inventory/cmd/...

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
