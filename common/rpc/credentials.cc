#include "common/rpc/credentials.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace verl {

absl::StatusOr<std::string> ReadSecretFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, ": cannot open '", path, "'"));
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(what, ": cannot read '", path, "'"));
  return out.str();
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  auto text = ReadSecretFile(path, "token file");
  if (!text.ok()) return text.status();
  std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat("token file '", path, "' is empty"));
  return token;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const ServerTlsFiles& files) {
  if (files.cert.empty() && files.key.empty()) {
    if (!files.client_ca.empty()) {
      return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key (client certificates are "
                                        "verified only over TLS)");
    }
    return grpc::InsecureServerCredentials();
  }
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  auto cert = ReadSecretFile(files.cert, "--tls-cert");
  if (!cert.ok()) return cert.status();
  auto key = ReadSecretFile(files.key, "--tls-key");
  if (!key.ok()) return key.status();
  pair.cert_chain = *std::move(cert);
  pair.private_key = *std::move(key);
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!files.client_ca.empty()) {
    auto ca = ReadSecretFile(files.client_ca, "--tls-client-ca");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *std::move(ca);
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const ClientTlsFiles& files) {
  if (files.ca.empty()) {
    if (!files.cert.empty() || !files.key.empty()) {
      return absl::InvalidArgumentError("--tls-cert/--tls-key need --tls-ca (the CA that signed the server)");
    }
    return grpc::InsecureChannelCredentials();
  }
  if (files.cert.empty() != files.key.empty()) return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  grpc::SslCredentialsOptions options;
  auto ca = ReadSecretFile(files.ca, "--tls-ca");
  if (!ca.ok()) return ca.status();
  options.pem_root_certs = *std::move(ca);
  if (!files.cert.empty()) {
    auto cert = ReadSecretFile(files.cert, "--tls-cert");
    if (!cert.ok()) return cert.status();
    auto key = ReadSecretFile(files.key, "--tls-key");
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *std::move(cert);
    options.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(options);
}

std::string BearerTokenMetadata(const std::string& token) { return absl::StrCat("Bearer ", token); }

grpc::Status CheckBearerToken(const grpc::ServerContext& context, const std::string& expected) {
  if (expected.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kAuthorizationMetadataKey);
  if (it == metadata.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing 'authorization: Bearer <token>' metadata");
  }
  const std::string value(it->second.data(), it->second.size());
  constexpr char kScheme[] = "Bearer ";
  if (value.rfind(kScheme, 0) != 0) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "authorization metadata must be 'Bearer <token>'");
  }
  const std::string given = value.substr(sizeof(kScheme) - 1);
  // Length may leak; the contents do not.
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ expected[i % expected.size()]);
  if (diff != 0) return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "invalid token");
  return grpc::Status::OK;
}

}  // namespace verl
