// The text of konnectivity.proto, embedded so a bundled single-file build (no .proto on disk,
// no import.meta.url) can load it. A unit test keeps it identical to the file.
export const PROTO_TEXT = `// Konnectivity wire protocol (compatible with apiserver-network-proxy), written for kctl from
// the facts in KONNECTIVITY.md. No package line: services and messages live in the root
// namespace, so the gRPC paths are /ProxyService/Proxy and /AgentService/Connect.
//
// Fields and values numbered 100 and up are kctl extensions. They are only ever sent to a peer
// that negotiated them (metadata "kctl-extensions: flow-control/1" on Connect, answered in the
// server's response headers); upstream peers never see them.
syntax = "proto3";

service ProxyService {
  rpc Proxy(stream Packet) returns (stream Packet) {}
}

service AgentService {
  rpc Connect(stream Packet) returns (stream Packet) {}
}

enum PacketType {
  DIAL_REQ = 0;
  DIAL_RSP = 1;
  CLOSE_REQ = 2;
  CLOSE_RSP = 3;
  DATA = 4;
  DIAL_CLS = 5;
  DRAIN = 6;
  // kctl extension: the sender may receive "bytes" more DATA bytes for "connectID".
  KCTL_CREDIT = 100;
  // kctl extension: liveness probe and its answer (both carry kctlPing).
  KCTL_PING = 101;
  KCTL_PONG = 102;
}

message Packet {
  PacketType type = 1;
  oneof payload {
    DialRequest dialRequest = 2;
    DialResponse dialResponse = 3;
    Data data = 4;
    CloseRequest closeRequest = 5;
    CloseResponse closeResponse = 6;
    CloseDial closeDial = 7;
    Drain drain = 8;
    KctlCredit kctlCredit = 100;
    KctlPing kctlPing = 101;
  }
}

message DialRequest {
  string protocol = 1;
  string address = 2;
  int64 random = 3;
  // kctl extension: the server's trace id for this dial, logged by both sides.
  string kctlTraceID = 100;
}

message DialResponse {
  string error = 1;
  int64 connectID = 2;
  int64 random = 3;
}

message CloseRequest {
  int64 connectID = 1;
}

message CloseResponse {
  string error = 1;
  int64 connectID = 2;
}

message CloseDial {
  int64 random = 1;
}

message Data {
  int64 connectID = 1;
  string error = 2;
  bytes data = 3;
}

message Drain {}

message KctlCredit {
  int64 connectID = 1;
  int64 bytes = 2;
}

message KctlPing {
  int64 nonce = 1;
}
`;
