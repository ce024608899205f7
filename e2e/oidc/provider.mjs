// A real OpenID Provider for Fabrik's end-to-end tests: `oidc-provider` (a certified OP library)
// served over HTTPS on loopback, with one static client, a fixed user table with groups, the
// authorization code flow (PKCE required), the device authorization grant, refresh tokens, and
// an admin endpoint that rotates the signing key.
//
// Usage:
//   node provider.mjs --cert server.pem --key server-key.pem [--port 0] [--host 127.0.0.1]
//        [--client-id fabrik] [--client-secret fabrik-secret] [--id-token-ttl 3600]
// Every option can also come from the environment: OIDC_CERT, OIDC_KEY, OIDC_PORT, OIDC_HOST,
// OIDC_CLIENT_ID, OIDC_CLIENT_SECRET, OIDC_ID_TOKEN_TTL (seconds).
//
// The first line on stdout is the issuer URL (`https://127.0.0.1:<port>`), printed once the
// server listens; everything else goes to stderr.
//
// Users (username / password → groups):
//   alice / alice-password → ml-team, gpu-users
//   bob   / bob-password   → finance
//   carol / carol-password → (none)
//
// Pages (all plain HTML forms, one form per page, so a test can drive them without a browser):
//   /interaction/:uid          login form (`login`, `password`) or consent form (one button)
//   /device                    the device flow's user code form (oidc-provider's own page)
// Admin (loopback test use only, no authentication):
//   POST /admin/rotate-key     makes a new RSA key the signing key; the previous one stays in
//                              the JWKS (tokens it signed still verify); older ones are dropped.
//                              Answers {"kid": "<new kid>", "jwks": ["<kid>", ...]}.
//   POST /admin/rotate-key?retire=true  the same, but drops the previous key too.
//   GET  /admin/keys           {"kid": "<current signing kid>", "jwks": [...]}.

import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:https';
import { parseArgs } from 'node:util';

import Provider from 'oidc-provider';
// The library's own in-memory adapter, one store for every Provider instance of this process
// (each instance would otherwise get a fresh one, and a key rotation would lose all tokens).
// A deep import: fine for the pinned version in package-lock.json.
import { createMemoryAdapter } from 'oidc-provider/lib/adapters/memory_adapter.js';

const { values: argv } = parseArgs({
  options: {
    cert: { type: 'string' },
    key: { type: 'string' },
    port: { type: 'string' },
    host: { type: 'string' },
    'client-id': { type: 'string' },
    'client-secret': { type: 'string' },
    'id-token-ttl': { type: 'string' },
  },
});

const env = process.env;
const config = {
  cert: argv.cert ?? env.OIDC_CERT,
  key: argv.key ?? env.OIDC_KEY,
  port: Number(argv.port ?? env.OIDC_PORT ?? 0),
  host: argv.host ?? env.OIDC_HOST ?? '127.0.0.1',
  clientId: argv['client-id'] ?? env.OIDC_CLIENT_ID ?? 'fabrik',
  clientSecret: argv['client-secret'] ?? env.OIDC_CLIENT_SECRET ?? 'fabrik-secret',
  idTokenTtl: Number(argv['id-token-ttl'] ?? env.OIDC_ID_TOKEN_TTL ?? 3600),
};
if (!config.cert || !config.key) {
  console.error('provider.mjs: --cert and --key (or OIDC_CERT, OIDC_KEY) are required');
  process.exit(2);
}
if (!Number.isInteger(config.idTokenTtl) || config.idTokenTtl < 1) {
  console.error('provider.mjs: --id-token-ttl must be a positive number of seconds');
  process.exit(2);
}

/** The user table: username → password, profile and groups. */
const USERS = {
  alice: { password: 'alice-password', name: 'Alice Example', groups: ['ml-team', 'gpu-users'] },
  bob: { password: 'bob-password', name: 'Bob Example', groups: ['finance'] },
  carol: { password: 'carol-password', name: 'Carol Example', groups: [] },
};

function account(id) {
  const user = USERS[id];
  if (!user) return undefined;
  return {
    accountId: id,
    async claims() {
      return {
        sub: id,
        name: user.name,
        preferred_username: id,
        email: `${id}@example.com`,
        email_verified: true,
        groups: user.groups,
      };
    },
  };
}

/** Signing keys, newest first: the first one signs, all are published. */
let keySerial = 0;
function newKey() {
  keySerial += 1;
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid: `key-${keySerial}`, alg: 'RS256', use: 'sig' };
}
let keys = [newKey()];

// Cookie signing keys and the token store stay the same across rotations, so sessions, grants
// and refresh tokens survive them.
const cookieKeys = [randomBytes(32).toString('hex')];
const adapter = createMemoryAdapter();

function html(title, body) {
  return `<!DOCTYPE html><html><head><meta charset="utf-8"><title>${title}</title></head>`
    + `<body><h1>${title}</h1>${body}</body></html>`;
}

function escape(s) {
  return String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function makeProvider(issuer) {
  const provider = new Provider(issuer, {
    clients: [{
      client_id: config.clientId,
      client_secret: config.clientSecret,
      client_name: 'Fabrik',
      // Native: loopback redirect URIs match with any port (RFC 8252 section 7.3).
      application_type: 'native',
      redirect_uris: ['http://127.0.0.1/callback', 'http://localhost/callback'],
      grant_types: ['authorization_code', 'refresh_token', 'urn:ietf:params:oauth:grant-type:device_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    }],
    adapter,
    jwks: { keys },
    cookies: { keys: cookieKeys },
    claims: {
      openid: ['sub'],
      profile: ['name', 'preferred_username'],
      email: ['email', 'email_verified'],
      groups: ['groups'],
    },
    scopes: ['openid', 'offline_access'],
    // Put the claims of the granted scopes into the ID token itself, not only into /userinfo:
    // the Kubernetes API server reads `email` and `groups` from the ID token.
    conformIdTokenClaims: false,
    findAccount: (_ctx, id) => account(id),
    features: {
      devInteractions: { enabled: false },
      deviceFlow: { enabled: true },
      revocation: { enabled: true },
    },
    pkce: { required: () => true },
    issueRefreshToken: async (_ctx, client, code) => client.grantTypeAllowed('refresh_token')
      && code.scopes.has('offline_access'),
    ttl: {
      IdToken: config.idTokenTtl,
      AccessToken: config.idTokenTtl,
      RefreshToken: 24 * 3600,
      Grant: 24 * 3600,
      Session: 24 * 3600,
      Interaction: 600,
      DeviceCode: 600,
      AuthorizationCode: 60,
    },
    interactions: {
      url: (_ctx, interaction) => `/interaction/${interaction.uid}`,
    },
    renderError: async (ctx, out) => {
      ctx.type = 'html';
      ctx.body = html('Error', `<pre id="error">${escape(out.error)}: ${escape(out.error_description ?? '')}</pre>`);
    },
  });
  provider.on('server_error', (_ctx, err) => console.error('server_error', err));
  return provider;
}

let provider;
let handler;

/** Installs a fresh Provider instance (the keys or the issuer changed). */
function install(issuerUrl) {
  provider = makeProvider(issuerUrl);
  handler = provider.callback();
}

async function readForm(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

function send(res, status, type, body) {
  res.statusCode = status;
  res.setHeader('Content-Type', type);
  res.setHeader('Cache-Control', 'no-store');
  res.end(body);
}

/** The login and consent pages: a username + password form, then a one-button consent form. */
async function interaction(req, res, uid, action) {
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid) {
    send(res, 400, 'text/html', html('Error', '<p>interaction mismatch</p>'));
    return;
  }
  const { prompt, params, session } = details;
  if (req.method === 'GET') {
    if (prompt.name === 'login') {
      send(res, 200, 'text/html', html('Sign in', `<form method="post" action="/interaction/${uid}/login">`
        + '<input type="text" name="login" autofocus> <input type="password" name="password">'
        + '<button type="submit">Sign in</button></form>'));
    } else if (prompt.name === 'consent') {
      send(res, 200, 'text/html', html('Authorize', `<p>${escape(params.client_id)} asks for: ${escape(params.scope)}</p>`
        + `<form method="post" action="/interaction/${uid}/confirm">`
        + '<input type="hidden" name="consent" value="yes"><button type="submit">Continue</button></form>'));
    } else {
      send(res, 501, 'text/html', html('Error', `<p>prompt ${escape(prompt.name)} not implemented</p>`));
    }
    return;
  }
  const form = await readForm(req);
  if (action === 'login' && prompt.name === 'login') {
    const login = form.get('login') ?? '';
    const user = USERS[login];
    if (!user || user.password !== form.get('password')) {
      send(res, 200, 'text/html', html('Sign in', '<p id="error">Invalid username or password.</p>'
        + `<form method="post" action="/interaction/${uid}/login">`
        + '<input type="text" name="login"> <input type="password" name="password">'
        + '<button type="submit">Sign in</button></form>'));
      return;
    }
    await provider.interactionFinished(req, res, { login: { accountId: login } }, { mergeWithLastSubmission: false });
    return;
  }
  if (action === 'confirm' && prompt.name === 'consent') {
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(' '));
    if (prompt.details.missingOIDCClaims) grant.addOIDCClaims(prompt.details.missingOIDCClaims);
    const grantId = await grant.save();
    await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
    return;
  }
  send(res, 400, 'text/html', html('Error', `<p>unexpected ${escape(action)} for prompt ${escape(prompt.name)}</p>`));
}

function keysReport() {
  return JSON.stringify({ kid: keys[0].kid, jwks: keys.map((k) => k.kid) });
}

async function handle(req, res) {
  const url = new URL(req.url, 'https://localhost');
  if (url.pathname === '/admin/rotate-key' && req.method === 'POST') {
    const retire = url.searchParams.get('retire') === 'true';
    keys = retire ? [newKey()] : [newKey(), keys[0]];
    install(issuer);
    console.error(`provider.mjs: signing key rotated to ${keys[0].kid}; published: ${keys.map((k) => k.kid).join(', ')}`);
    send(res, 200, 'application/json', keysReport());
    return;
  }
  if (url.pathname === '/admin/keys' && req.method === 'GET') {
    send(res, 200, 'application/json', keysReport());
    return;
  }
  // oidc-provider follows OIDC Core section 11 to the letter: an authorization request without
  // prompt=consent loses `offline_access` (no refresh token). Keycloak, the reference issuer,
  // grants it without; behave the same by asking for consent (the consent page then shows).
  if (url.pathname === '/auth' && req.method === 'GET'
    && (url.searchParams.get('scope') ?? '').split(' ').includes('offline_access')
    && !url.searchParams.has('prompt')) {
    url.searchParams.set('prompt', 'consent');
    req.url = `${url.pathname}${url.search}`;
  }
  const m = url.pathname.match(/^\/interaction\/([^/]+)(?:\/(login|confirm))?$/);
  if (m) {
    await interaction(req, res, m[1], m[2]);
    return;
  }
  handler(req, res);
}

const server = createServer({ cert: readFileSync(config.cert), key: readFileSync(config.key) }, (req, res) => {
  handle(req, res).catch((err) => {
    console.error('provider.mjs: request failed', err);
    if (!res.headersSent) send(res, 500, 'text/plain', String(err?.message ?? err));
  });
});

let issuer;
server.listen(config.port, config.host, () => {
  const { port } = server.address();
  const host = config.host.includes(':') ? `[${config.host}]` : config.host;
  issuer = `https://${host}:${port}`;
  install(issuer);
  process.stdout.write(`${issuer}\n`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
