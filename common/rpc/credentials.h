#ifndef VERL_COMMON_RPC_CREDENTIALS_H_
#define VERL_COMMON_RPC_CREDENTIALS_H_

// TLS credentials and bearer-token authentication for the JobService (and anything else that serves remote clients).
//
//   server: MakeServerCredentials({cert, key, client_ca}) -> TLS (client certificates required and verified when
//           client_ca is set), or insecure when cert and key are empty; CheckBearerToken(context, token) at the top of
//           every handler.
//   client: MakeChannelCredentials({ca, cert, key}) -> TLS when ca is set (cert/key: client certificate), else
//           insecure; the token goes in BearerTokenMetadata() on every call.
//
// Errors name the flag's file: a missing or unreadable PEM file is NotFound / InvalidArgument naming it. The PEM
// contents are checked by gRPC when the server starts or the channel connects.

#include <memory>
#include <string>

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_context.h>

#include "absl/status/statusor.h"

namespace verl {

struct ServerTlsFiles {
  std::string cert;       // PEM certificate chain of the server
  std::string key;        // PEM private key
  std::string client_ca;  // PEM CA bundle: when set, clients must present a certificate it signed
};

struct ClientTlsFiles {
  std::string ca;    // PEM CA bundle that signed the server's certificate; empty: no TLS
  std::string cert;  // optional client certificate chain (PEM)
  std::string key;   // its private key (PEM)
};

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const ServerTlsFiles& files);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const ClientTlsFiles& files);

// The whole file, for PEM files and token files. NotFound / InvalidArgument naming `what` and the path.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path, const std::string& what);

// A token read from a file: surrounding whitespace (a trailing newline, as in a Kubernetes Secret) removed;
// InvalidArgument naming the file when nothing is left.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// OK when `expected` is empty (no token configured) or the call carries "authorization: Bearer <expected>";
// otherwise UNAUTHENTICATED (missing header, wrong scheme, wrong token). The comparison takes the same time for
// every token of the same length.
grpc::Status CheckBearerToken(const grpc::ServerContext& context, const std::string& expected);

// The metadata pair a client adds: {"authorization", "Bearer <token>"}.
inline constexpr char kAuthorizationMetadataKey[] = "authorization";
std::string BearerTokenMetadata(const std::string& token);

}  // namespace verl

#endif  // VERL_COMMON_RPC_CREDENTIALS_H_
