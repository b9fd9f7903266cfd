"""What the resource modules share: the read and write routers' guards, paging parameters."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query

from api.deps import require_read, require_write

READ = [Depends(require_read)]
"""Dependencies of a read route: a token where reads are protected."""
WRITE = [Depends(require_write)]
"""Dependencies of a write route: a write token."""

MAX_LIMIT = 1000
"""The largest page a list returns."""

Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Items per page.")]
Offset = Annotated[int, Query(ge=0, le=2**31 - 1, description="Items to skip.")]
Name = Annotated[str, Query(min_length=1, max_length=200)]
