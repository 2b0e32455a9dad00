#!/bin/sh
echo "The Prisma schema engine is not installed here; run migrations with 'pnpm --filter @botdir/db migrate'." >&2
exit 1
