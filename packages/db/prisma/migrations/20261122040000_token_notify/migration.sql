-- Token changes are announced on the channel `botdir_tokens`, so each API process can keep an
-- in-process set of the valid token hashes (apps/api/src/services/token-set.ts) and refuse an
-- unknown token without any I/O. A token is valid while its bot is approved; the payload is
-- "<hash no longer valid>:<hash now valid>" (either side empty). Delivered at commit.
CREATE FUNCTION botdir_notify_token_change() RETURNS trigger AS $$
DECLARE
  old_valid text := NULL;
  new_valid text := NULL;
BEGIN
  IF TG_OP <> 'INSERT' AND OLD.status = 'approved' THEN
    old_valid := OLD.token_hash;
  END IF;
  IF TG_OP <> 'DELETE' AND NEW.status = 'approved' THEN
    new_valid := NEW.token_hash;
  END IF;
  IF old_valid IS DISTINCT FROM new_valid THEN
    PERFORM pg_notify('botdir_tokens', coalesce(old_valid, '') || ':' || coalesce(new_valid, ''));
  END IF;
  RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER bots_token_notify
  AFTER INSERT OR DELETE OR UPDATE OF token_hash, status ON bots
  FOR EACH ROW EXECUTE FUNCTION botdir_notify_token_change();
