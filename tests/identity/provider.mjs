// A real OpenID provider for the identity tests: panva's oidc-provider (OpenID Certified), on loopback.
// Usage: node provider.mjs PORT; configured by the environment:
//   OP_JWKS      the private JSON Web Key Set it signs with (the tests make and rotate it)
//   OP_ACCOUNTS  {"alice": {"email": "...", "groups": ["..."]}, ...}: who may sign in (any password)
//   OP_CLIENT    the client id the broker is configured with; OP_REDIRECTS its redirect URIs (JSON list)
import Provider from 'oidc-provider';

const port = Number(process.argv[2]);
const issuer = `http://127.0.0.1:${port}`;
const accounts = JSON.parse(process.env.OP_ACCOUNTS || '{}');

const provider = new Provider(issuer, {
  clients: [{
    client_id: process.env.OP_CLIENT,
    token_endpoint_auth_method: 'none',  // a public client: the dashboard with PKCE, the CLI with the device flow
    application_type: 'native',
    redirect_uris: JSON.parse(process.env.OP_REDIRECTS || '[]'),
    grant_types: ['authorization_code', 'refresh_token', 'urn:ietf:params:oauth:grant-type:device_code'],
    response_types: ['code'],
  }],
  jwks: JSON.parse(process.env.OP_JWKS),
  features: { devInteractions: { enabled: true }, deviceFlow: { enabled: true } },
  pkce: { required: () => true },
  scopes: ['openid', 'email', 'groups', 'offline_access'],
  claims: { openid: ['sub'], email: ['email'], groups: ['groups'] },
  conformIdTokenClaims: false,  // the ID token carries the scopes' claims: the broker reads groups from it
  issueRefreshToken: async () => true,
  ttl: { IdToken: Number(process.env.OP_ID_TOKEN_TTL || 3600), DeviceCode: 600, RefreshToken: 86400 },
  async findAccount(ctx, id) {
    const account = accounts[id];
    if (!account) return undefined;
    return { accountId: id, claims: async () => ({ sub: id, email: account.email, groups: account.groups }) };
  },
});
provider.listen(port, '127.0.0.1', () => console.log(`listening ${issuer}`));
